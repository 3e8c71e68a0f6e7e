//! Golden files of rendered manifests (`helm template`, `kubectl
//! kustomize`): compared byte for byte, rewritten with `UPDATE_GOLDEN=1`.

use std::collections::BTreeSet;

use super::repo;

/// One rendering to compare: the golden file `<dir>/<name>.yaml`, what it
/// was rendered from (for the message), and the output.
pub struct Rendered {
    pub name: String,
    pub from: String,
    pub output: String,
}

/// Compares each rendering with its golden file in `dir` (relative to the
/// repository), or rewrites the files when `UPDATE_GOLDEN=1`; fails naming
/// each difference, and each golden file that belongs to no rendering (a
/// renamed case leaves one behind). `regenerate` is the command that
/// rewrites them, for the message.
pub fn check_golden(dir: &str, rendered: &[Rendered], regenerate: &str) {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let tag = dir.rsplit('/').next().unwrap_or(dir);
    let actual_dir = ccm_testsupport::target_dir().join(format!("{tag}-golden"));
    std::fs::create_dir_all(&actual_dir).unwrap();
    if update {
        std::fs::create_dir_all(repo().join(dir)).unwrap();
    }
    let mut failures = Vec::new();
    for Rendered { name, from, output } in rendered {
        let golden = format!("{dir}/{name}.yaml");
        if update {
            std::fs::write(repo().join(&golden), output).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(repo().join(&golden)).unwrap_or_default();
        if &expected != output {
            let actual_file = actual_dir.join(format!("{name}.yaml"));
            std::fs::write(&actual_file, output).unwrap();
            // Relative to the repository when the target directory is in it.
            let actual_file = actual_file.canonicalize().unwrap_or(actual_file.clone());
            let root = repo().canonicalize().unwrap();
            let shown = actual_file.strip_prefix(&root).unwrap_or(&actual_file);
            failures.push(format!(
                "{golden} differs from the rendering of {from}\n{}  see: diff -u {golden} {}\n",
                first_difference(&expected, output),
                shown.display()
            ));
        }
    }
    let names: BTreeSet<String> = rendered
        .iter()
        .map(|r| format!("{}.yaml", r.name))
        .collect();
    for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".yaml") && !names.contains(&file) {
            failures.push(format!("{dir}/{file} belongs to no case: delete it"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nIf the change is intended, regenerate the golden files and review them:\n  \
         UPDATE_GOLDEN=1 {regenerate}\n  git diff {dir}",
        failures.join("\n")
    );
}

/// Where `expected` and `actual` first differ, with a few lines around.
fn first_difference(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let at = (0..e.len().max(a.len()))
        .find(|&i| e.get(i) != a.get(i))
        .unwrap_or(e.len().min(a.len()));
    let from = at.saturating_sub(3);
    let mut out = format!(
        "first difference at line {} (- golden file, + rendered):\n",
        at + 1
    );
    for (sign, lines) in [("-", &e), ("+", &a)] {
        for (i, line) in lines.iter().enumerate().skip(from).take(at - from + 4) {
            let mark = if i == at { sign } else { " " };
            out.push_str(&format!("{mark}{:>5} {line}\n", i + 1));
        }
    }
    out
}
