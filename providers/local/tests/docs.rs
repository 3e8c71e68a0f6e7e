//! docs/providers/local.md lists the annotations from the provider's own
//! schema; this keeps the two the same (UPDATE_PROVIDER_DOC=1 rewrites the
//! generated part).

use std::path::Path;

const BEGIN: &str = "<!-- BEGIN GENERATED: annotations (providers/local/tests/docs.rs; UPDATE_PROVIDER_DOC=1 rewrites) -->\n";
const END: &str = "<!-- END GENERATED: annotations -->";

#[test]
fn the_annotation_reference_is_generated_from_the_schema() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/providers/local.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(BEGIN).expect("the BEGIN marker") + BEGIN.len();
    let end = doc.find(END).expect("the END marker");
    let want = ccm_local_provider::annotations::markdown_table();
    if doc[start..end] == want {
        return;
    }
    if std::env::var_os("UPDATE_PROVIDER_DOC").is_some() {
        let updated = format!("{}{want}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/providers/local.md's annotation table is stale; run UPDATE_PROVIDER_DOC=1 cargo test -p ccm-local-provider --test docs"
    );
}
