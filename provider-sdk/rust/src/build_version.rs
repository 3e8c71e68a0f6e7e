//! What a binary's `--version` prints: its crate version, and the git commit
//! it was built from when the build says so.
//!
//! The image build (`make images`, hack/images.sh) sets `CCM_BUILD_COMMIT`;
//! a binary reads it at compile time with `option_env!` in its own crate, so
//! cargo rebuilds only that crate when the commit changes, and an ordinary
//! `cargo build` (no variable) is not rebuilt on every commit:
//!
//! ```
//! let v = ccm_provider_sdk::build_version::version(
//!     env!("CARGO_PKG_VERSION"),
//!     option_env!("CCM_BUILD_COMMIT"),
//! );
//! assert!(v.starts_with(env!("CARGO_PKG_VERSION")));
//! ```

use std::sync::OnceLock;

/// `version`, or `version (commit COMMIT)` when `commit` is set and not empty.
/// The first call's answer is kept (a process has one version), so it can
/// be handed to clap's `#[command(version = ...)]`, which wants `&'static str`.
pub fn version(version: &'static str, commit: Option<&'static str>) -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    match commit.filter(|c| !c.is_empty()) {
        None => version,
        Some(c) => VERSION.get_or_init(|| format!("{version} (commit {c})")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_commit_the_crate_version_alone() {
        assert_eq!(super::version("1.2.3", None), "1.2.3");
        assert_eq!(super::version("1.2.3", Some("")), "1.2.3");
    }

    #[test]
    fn with_a_commit_both() {
        assert_eq!(
            super::version("1.2.3", Some("0123abc")),
            "1.2.3 (commit 0123abc)"
        );
    }
}
