//! docs/contract.md is rendered from the proto comments, so the reference
//! cannot drift from the contract. This test fails when it is stale;
//! `UPDATE_CONTRACT_DOC=1 cargo test -p ccm-proto --test contract_doc`
//! rewrites it.

use std::collections::HashMap;
use std::fmt::Write;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    FileDescriptorSet,
};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/contract.md");

struct Comments(HashMap<Vec<i32>, String>);

impl Comments {
    fn of(file: &FileDescriptorProto) -> Self {
        let mut map = HashMap::new();
        for loc in file
            .source_code_info
            .as_ref()
            .map(|s| s.location.as_slice())
            .unwrap_or_default()
        {
            if let Some(c) = &loc.leading_comments {
                let text: Vec<&str> = c.lines().map(str::trim).collect();
                map.insert(loc.path.clone(), text.join(" ").trim().to_owned());
            }
        }
        Comments(map)
    }

    fn get(&self, path: &[i32]) -> &str {
        self.0.get(path).map(String::as_str).unwrap_or("")
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn type_name(f: &FieldDescriptorProto) -> String {
    let base = match f.r#type() {
        Type::Message | Type::Enum => f
            .type_name()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_owned(),
        other => format!("{other:?}").to_lowercase(),
    };
    if f.label() == Label::Repeated {
        if base.ends_with("Entry") {
            return "map<string, string>".into();
        }
        return format!("repeated {base}");
    }
    if f.proto3_optional() {
        return format!("optional {base}");
    }
    base
}

fn message(out: &mut String, c: &Comments, path: &[i32], m: &DescriptorProto) {
    writeln!(out, "### {}\n\n{}\n", m.name(), c.get(path)).unwrap();
    if m.field.is_empty() {
        return;
    }
    writeln!(out, "| field | # | type | meaning |\n|---|---|---|---|").unwrap();
    for (i, f) in m.field.iter().enumerate() {
        let mut p = path.to_vec();
        p.extend([2, i as i32]);
        let oneof = f
            .oneof_index
            .filter(|_| !f.proto3_optional())
            .map(|o| format!(" (oneof `{}`)", m.oneof_decl[o as usize].name()))
            .unwrap_or_default();
        writeln!(
            out,
            "| `{}`{oneof} | {} | `{}` | {} |",
            f.name(),
            f.number(),
            type_name(f),
            cell(c.get(&p))
        )
        .unwrap();
    }
    out.push('\n');
}

fn enumeration(out: &mut String, c: &Comments, path: &[i32], e: &EnumDescriptorProto) {
    writeln!(out, "### enum {}\n\n{}\n", e.name(), c.get(path)).unwrap();
    writeln!(out, "| value | # | meaning |\n|---|---|---|").unwrap();
    for (i, v) in e.value.iter().enumerate() {
        let mut p = path.to_vec();
        p.extend([2, i as i32]);
        writeln!(
            out,
            "| `{}` | {} | {} |",
            v.name(),
            v.number(),
            cell(c.get(&p))
        )
        .unwrap();
    }
    out.push('\n');
}

fn render(set: &FileDescriptorSet) -> String {
    let mut out = String::from(
        "# Provider contract reference (`ccmrs.cloudprovider.v1`)\n\n\
         Generated from the comments in `proto/ccmrs/cloudprovider/v1/*.proto` by\n\
         `proto/tests/contract_doc.rs`; do not edit by hand. The conventions\n\
         (REQUIRED/OPTIONAL, zero values, limits, request ids) are in the header\n\
         of `types.proto`; errors in `errors.proto`. The narrative specification,\n\
         with an error table per RPC, is [spec.md](spec.md).\n\n",
    );
    let mut files: Vec<&FileDescriptorProto> = set
        .file
        .iter()
        .filter(|f| f.package() == "ccmrs.cloudprovider.v1")
        .collect();
    files.sort_by_key(|f| f.name().to_owned());
    for file in files {
        let c = Comments::of(file);
        writeln!(out, "## {}\n\n{}\n", file.name(), c.get(&[12])).unwrap();
        for (si, s) in file.service.iter().enumerate() {
            writeln!(
                out,
                "### service {}\n\n{}\n",
                s.name(),
                c.get(&[6, si as i32])
            )
            .unwrap();
            writeln!(
                out,
                "| rpc | request → response | semantics |\n|---|---|---|"
            )
            .unwrap();
            for (mi, m) in s.method.iter().enumerate() {
                let short = |t: &str| t.rsplit('.').next().unwrap_or_default().to_owned();
                writeln!(
                    out,
                    "| `{}` | `{}` → `{}` | {} |",
                    m.name(),
                    short(m.input_type()),
                    short(m.output_type()),
                    cell(c.get(&[6, si as i32, 2, mi as i32]))
                )
                .unwrap();
            }
            out.push('\n');
        }
        for (ei, e) in file.enum_type.iter().enumerate() {
            enumeration(&mut out, &c, &[5, ei as i32], e);
        }
        for (mi, m) in file.message_type.iter().enumerate() {
            message(&mut out, &c, &[4, mi as i32], m);
        }
    }
    out.trim_end().to_owned() + "\n"
}

#[test]
fn contract_reference_matches_the_proto_comments() {
    let set = FileDescriptorSet::decode(ccm_proto::v1::FILE_DESCRIPTOR_SET).unwrap();
    let rendered = render(&set);
    if std::env::var_os("UPDATE_CONTRACT_DOC").is_some() {
        std::fs::write(DOC, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(DOC).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/contract.md is stale: run `UPDATE_CONTRACT_DOC=1 cargo test -p ccm-proto --test contract_doc`"
    );
}

#[test]
fn every_service_method_and_field_is_documented() {
    let set = FileDescriptorSet::decode(ccm_proto::v1::FILE_DESCRIPTOR_SET).unwrap();
    let rendered = render(&set);
    // An empty last cell means a missing comment (buf lint COMMENTS also
    // enforces this; the check keeps the rendered reference honest).
    let undocumented: Vec<&str> = rendered
        .lines()
        .filter(|l| l.starts_with("| `") && l.ends_with("|  |"))
        .collect();
    assert!(undocumented.is_empty(), "{undocumented:#?}");
}
