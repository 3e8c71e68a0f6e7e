//! Property tests of what the service-lb-controller tells the provider and
//! writes back: arbitrary Services (any text in annotations, ports, IPs,
//! families and policies, huge values, Unicode) never make a conversion
//! panic; what is sent passes the SDK's request validation (the provider
//! would refuse anything else as malformed); a refusal names the Service
//! field to fix.

use ccm_provider_sdk::{proto, validate};
use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::arb;

/// The fields a `SpecError` may name: those `convert` reads.
const SPEC_FIELDS: &[&str] = &[
    "metadata.namespace",
    "metadata.name",
    "metadata.uid",
    "metadata.labels[",
    "metadata.annotations",
    "spec.ports",
    "spec.loadBalancerSourceRanges[",
    "spec.ipFamilies[",
    "spec.loadBalancerIP",
    "spec.clusterIPs[",
];

fn identity_is_valid(svc: &Service) -> bool {
    let m = &svc.metadata;
    [&m.namespace, &m.name, &m.uid]
        .iter()
        .all(|v| validate::name("f", v.as_deref().unwrap_or_default()).is_ok())
}

proptest! {
    #[test]
    fn what_is_sent_is_what_the_provider_accepts(svc in arb::service()) {
        match to_proto(&svc) {
            Ok(p) => {
                let checked = validate::service("service", &Some(p.clone()));
                prop_assert!(checked.is_ok(), "{:?}", checked);
                prop_assert_eq!(to_proto_ref(&svc), p);
            }
            Err(e) => {
                prop_assert!(
                    SPEC_FIELDS.iter().any(|f| e.field.starts_with(f)),
                    "{} names no Service field",
                    e
                );
                prop_assert!(!e.problem.is_empty());
            }
        }
        // Reads and deletes always have a description to send: valid
        // whenever the Service's identity is.
        let r = to_proto_ref(&svc);
        if identity_is_valid(&svc) {
            let checked = validate::service_ref("service", &Some(r.clone()));
            prop_assert!(checked.is_ok(), "{:?}", checked);
            prop_assert_eq!(Some(r.uid), svc.metadata.uid.clone());
        }
    }

    /// Source ranges are canonical CIDRs the provider accepts; a refusal
    /// names the entry, which is indeed not a CIDR.
    #[test]
    fn source_ranges_are_canonical_or_name_the_bad_entry(svc in arb::service()) {
        let entries: Vec<String> = match spec(&svc).and_then(|s| s.load_balancer_source_ranges.clone()) {
            Some(r) if !r.is_empty() => r,
            _ => svc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SOURCE_RANGES_ANNOTATION))
                .filter(|a| !a.trim().is_empty())
                .map(|a| a.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
        };
        match source_ranges(&svc) {
            Ok(ranges) => {
                prop_assert_eq!(ranges.len(), entries.len());
                for e in &entries {
                    let prefix = e.trim().rsplit_once('/').unwrap().1;
                    prop_assert!(prefix.bytes().all(|b| b.is_ascii_digit()), "{:?} taken", e);
                }
                for r in &ranges {
                    prop_assert!(validate::cidr("r", r).is_ok(), "{:?}", r);
                    let again = parse_cidr(r);
                    prop_assert_eq!(again.as_ref(), Some(r), "canonical");
                }
            }
            Err(e) => {
                let i: usize = e.field.rsplit_once('[').unwrap().1.trim_end_matches(']').parse().unwrap();
                prop_assert!(parse_cidr(entries[i].trim()).is_none());
                prop_assert!(entries[..i].iter().all(|e| parse_cidr(e.trim()).is_some()));
            }
        }
    }

    /// A status the provider may send (the SDK accepted it) reads back
    /// unchanged after the round trip through the Service.
    #[test]
    fn provider_statuses_round_trip_through_the_service(ingress in vec(arb::ingress(), 0..4)) {
        let status = proto::LoadBalancerStatus {
            ingress: ingress
                .iter()
                .map(ingress_to_proto)
                .filter(ingress_acceptable)
                .collect(),
        };
        let k8s = ingress_from_proto(&status);
        let back: Vec<proto::LoadBalancerIngress> = k8s.iter().map(ingress_to_proto).collect();
        prop_assert_eq!(&back, &status.ingress);
        let mut reversed = k8s.clone();
        reversed.reverse();
        prop_assert!(ingress_equal(&k8s, &reversed));
    }

    #[test]
    fn condition_messages_are_cut_at_a_character(
        message in prop_oneof![
            any::<String>(),
            (prop::sample::select(&['a', 'é', '€', '😀'][..]), 1000usize..1100)
                .prop_map(|(c, n)| std::iter::repeat_n(c, n / c.len_utf8() + n % 4).collect()),
        ],
    ) {
        let out = bounded(&message);
        if message.len() <= 1024 {
            prop_assert_eq!(out, message);
        } else {
            let kept = out.strip_suffix('…').unwrap();
            prop_assert!(kept.len() <= 1024 && kept.len() + 4 > 1024);
            prop_assert!(message.starts_with(kept));
        }
    }

    /// The typo hints: only unknown keys under a provider prefix, each
    /// with a known key as its hint.
    #[test]
    fn unknown_annotations_are_unknown_keys_under_a_prefix(
        svc in arb::service(),
        prefixes in vec(prop_oneof![arb::text(), Just("service.beta.kubernetes.io/".to_owned())], 0..3),
        known in vec(prop_oneof![arb::label_key(), arb::text()], 0..4),
    ) {
        let schema = proto::AnnotationSchema { prefixes: prefixes.clone(), known_keys: known.clone(), ..Default::default() };
        let annotations = svc.metadata.annotations.clone().unwrap_or_default();
        for (k, hint) in unknown_annotations(&svc, &schema) {
            prop_assert!(annotations.contains_key(&k));
            prop_assert!(prefixes.iter().any(|p| k.starts_with(p.as_str())));
            prop_assert!(!known.contains(&k));
            prop_assert!(hint.is_none_or(|h| known.contains(&h)));
        }
    }

    /// A one-character typo of a known key under a provider prefix gets
    /// that key as its hint.
    #[test]
    fn a_one_character_typo_gets_the_known_key_as_its_hint(
        name in "[a-z][a-z-]{3,30}",
        at in any::<prop::sample::Index>(),
        typo in "[0-9]",
    ) {
        let prefix = "example.com/";
        let known = format!("{prefix}{name}");
        let i = at.index(name.len());
        let mut misspelt = name.clone();
        misspelt.replace_range(i..=i, &typo);
        let key = format!("{prefix}{misspelt}");
        let svc = Service {
            metadata: kube::api::ObjectMeta {
                annotations: Some([(key.clone(), "v".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let schema = proto::AnnotationSchema {
            prefixes: vec![prefix.to_owned()],
            known_keys: vec![known.clone()],
            ..Default::default()
        };
        prop_assert_eq!(unknown_annotations(&svc, &schema), vec![(key, Some(known))]);
    }

    #[test]
    fn edit_distance_is_a_distance(a in arb::text(), b in arb::text()) {
        let d = edit_distance(&a, &b);
        prop_assert_eq!(d, edit_distance(&b, &a));
        prop_assert_eq!(edit_distance(&a, &a), 0);
        prop_assert!(d <= a.chars().count().max(b.chars().count()));
        prop_assert!(d >= a.chars().count().abs_diff(b.chars().count()));
    }
}
