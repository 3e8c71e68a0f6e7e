//! Annotations under the provider's prefixes that it does not know.

use ccm_provider_sdk::proto;
use k8s_openapi::api::core::v1::Service;

/// Annotation keys under one of the provider's prefixes that it does not
/// know, each with the known key closest to it (if one is close enough to
/// be a typo).
pub fn unknown_annotations(
    svc: &Service,
    schema: &proto::AnnotationSchema,
) -> Vec<(String, Option<String>)> {
    let Some(annotations) = svc.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    annotations
        .keys()
        .filter(|k| schema.prefixes.iter().any(|p| k.starts_with(p.as_str())))
        .filter(|k| !schema.known_keys.contains(k))
        .map(|k| {
            let chars = k.chars().count();
            let close_enough = |known: &str| (known.len() / 4).max(2);
            let closest = schema
                .known_keys
                .iter()
                // The length difference is a lower bound of the distance:
                // keys too long or short to be close are never compared, so
                // a provider's huge known key costs no k x n table.
                .filter(|known| chars.abs_diff(known.chars().count()) <= close_enough(known))
                .map(|known| (edit_distance(k, known), known))
                .min()
                .filter(|(d, known)| *d <= close_enough(known))
                .map(|(_, known)| known.clone());
            (k.clone(), closest)
        })
        .collect()
}

/// Levenshtein distance with adjacent transpositions counted as one edit
/// (optimal string alignment): "intrenal" is one edit from "internal".
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::lb_service;

    #[test]
    fn unknown_annotation_keys_get_the_closest_known_key() {
        let schema = proto::AnnotationSchema {
            prefixes: vec!["lb.example.com/".into()],
            known_keys: vec![
                "lb.example.com/internal".into(),
                "lb.example.com/health-check-path".into(),
            ],
            ..Default::default()
        };
        let mut s = lb_service();
        s.metadata.annotations = Some(
            [
                ("lb.example.com/intrenal", "true"),
                ("lb.example.com/internal", "true"),
                ("lb.example.com/completely-different", "x"),
                ("other.example.com/intrenal", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        let mut found = unknown_annotations(&s, &schema);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("lb.example.com/completely-different".to_owned(), None),
                (
                    "lb.example.com/intrenal".to_owned(),
                    Some("lb.example.com/internal".to_owned())
                ),
            ]
        );
        assert_eq!(edit_distance("health-check-paht", "health-check-path"), 1);
    }

    /// Found by review while writing the properties: the schema is the
    /// provider's, unchecked, and each unknown annotation built a table of
    /// its key's length times each known key's: gigabytes for a known key
    /// of a few megabytes.
    #[test]
    fn huge_known_keys_are_never_compared() {
        let schema = proto::AnnotationSchema {
            prefixes: vec!["lb.example.com/".into()],
            known_keys: vec![format!("lb.example.com/{}", "x".repeat(1_000_000))],
            ..Default::default()
        };
        let mut s = lb_service();
        s.metadata.annotations =
            Some([("lb.example.com/intrenal".to_owned(), "x".to_owned())].into());
        let started = std::time::Instant::now();
        assert_eq!(
            unknown_annotations(&s, &schema),
            vec![("lb.example.com/intrenal".to_owned(), None)]
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
