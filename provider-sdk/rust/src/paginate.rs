//! Keyset pagination for list RPCs. A provider returns its whole list; the
//! SDK sorts it by a unique key and serves pages after the last key seen, so
//! every entry that exists for the whole listing appears exactly once, even
//! when entries are added or removed between pages.

use crate::validate::{Checked, Violation};

/// Page size when the request says 0.
pub const DEFAULT_PAGE_SIZE: usize = 500;
/// The largest page served, whatever the request asks.
pub const MAX_PAGE_SIZE: usize = 5000;

const TOKEN_PREFIX: &str = "k1.";

/// Returns the page after `token` and the token for the next page (empty on
/// the last page).
pub fn page<T>(
    mut all: Vec<T>,
    key: impl Fn(&T) -> String,
    page_size: i32,
    token: &str,
) -> Checked<(Vec<T>, String)> {
    if page_size < 0 {
        return Err(Violation {
            field: "page_size".into(),
            problem: format!("{page_size} is negative"),
        });
    }
    let size = match page_size as usize {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    let after = if token.is_empty() {
        None
    } else {
        Some(decode(token).ok_or_else(|| Violation {
            field: "page_token".into(),
            problem: "not a token this provider issued".into(),
        })?)
    };
    all.sort_by_key(|t| key(t));
    let start = match &after {
        None => 0,
        Some(k) => all.partition_point(|t| key(t).as_str() <= k.as_str()),
    };
    let mut rest: Vec<T> = all.into_iter().skip(start).collect();
    let next = if rest.len() > size {
        rest.truncate(size);
        encode(&key(rest.last().expect("size > 0")))
    } else {
        String::new()
    };
    Ok((rest, next))
}

fn encode(key: &str) -> String {
    let mut s = String::with_capacity(TOKEN_PREFIX.len() + key.len() * 2);
    s.push_str(TOKEN_PREFIX);
    for b in key.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn decode(token: &str) -> Option<String> {
    let hex = token.strip_prefix(TOKEN_PREFIX)?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let digit = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let bytes: Option<Vec<u8>> = hex
        .chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_entry_once() {
        let all: Vec<String> = (0..1234)
            .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
            .collect();
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let (page, next) = page(all.clone(), |s| s.clone(), 100, &token).unwrap();
            assert!(page.len() <= 100);
            seen.extend(page);
            if next.is_empty() {
                break;
            }
            token = next;
        }
        let mut want = all;
        want.sort();
        assert_eq!(seen, want);
    }

    #[test]
    fn entries_removed_between_pages_do_not_shift_the_rest() {
        let all: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let (first, token) = page(all.clone(), |s| s.clone(), 4, "").unwrap();
        assert_eq!(first, ["k0", "k1", "k2", "k3"]);
        let fewer: Vec<String> = all.into_iter().filter(|k| k != "k1" && k != "k5").collect();
        let (second, _) = page(fewer, |s| s.clone(), 4, &token).unwrap();
        assert_eq!(second, ["k4", "k6", "k7", "k8"]);
    }

    /// Found by proptests::any_token_is_refused_or_read_without_panicking:
    /// a token with a multi-byte character panicked the server (a string
    /// sliced inside a character), a sign was read as a hex digit.
    #[test]
    fn tokens_that_are_not_hex_are_refused() {
        for token in ["k1.0é0", "k1.aé", "k1.+a+b", "k1.6"] {
            assert_eq!(
                page(vec!["a".to_string()], |s| s.clone(), 1, token)
                    .unwrap_err()
                    .field,
                "page_token",
                "{token}"
            );
        }
        assert_eq!(decode("k1.4A"), Some("J".into()));
    }

    #[test]
    fn bad_tokens_and_sizes_are_named() {
        assert_eq!(
            page(vec!["a".to_string()], |s| s.clone(), 1, "garbage")
                .unwrap_err()
                .field,
            "page_token"
        );
        assert_eq!(
            page(vec!["a".to_string()], |s| s.clone(), -1, "")
                .unwrap_err()
                .field,
            "page_size"
        );
    }
}

/// Properties of the pager: a listing returns every entry exactly once
/// whatever the page size and whatever changes between pages, and no token
/// a client sends (the controller echoes the provider's, but anything may
/// arrive on the socket) makes it panic.
#[cfg(test)]
mod proptests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::collection::{btree_set, vec};
    use proptest::prelude::*;

    use super::*;

    fn arb_key() -> BoxedStrategy<String> {
        prop_oneof!["[a-c0-9./]{0,4}", any::<String>()].boxed()
    }

    /// Follows a listing to its end; between pages `change(page_index,
    /// current)` may add and remove keys.
    fn list_all(
        mut current: BTreeSet<String>,
        page_size: i32,
        mut change: impl FnMut(usize, &mut BTreeSet<String>),
    ) -> Result<Vec<String>, TestCaseError> {
        let limit = match page_size {
            0 => DEFAULT_PAGE_SIZE,
            n => (n as usize).min(MAX_PAGE_SIZE),
        };
        let mut seen = Vec::new();
        let mut token = String::new();
        for i in 0.. {
            let (entries, next) = page(
                current.iter().cloned().collect(),
                |k| k.clone(),
                page_size,
                &token,
            )
            .unwrap();
            prop_assert!(entries.len() <= limit);
            prop_assert!(entries.windows(2).all(|w| w[0] < w[1]), "a page is sorted");
            seen.extend(entries);
            if next.is_empty() {
                break;
            }
            prop_assert!(next > token || token.is_empty(), "tokens move forward");
            token = next;
            prop_assert!(i < 10_000, "the listing never ends");
            change(i, &mut current);
        }
        Ok(seen)
    }

    proptest! {
        #[test]
        fn a_listing_returns_every_entry_once_in_order(
            keys in btree_set(arb_key(), 0..40),
            page_size in 0i32..12,
        ) {
            let seen = list_all(keys.clone(), page_size, |_, _| {})?;
            prop_assert_eq!(seen, keys.into_iter().collect::<Vec<_>>());
        }

        /// Entries present for the whole listing appear exactly once; no
        /// entry appears twice, whatever comes and goes between pages.
        #[test]
        fn entries_that_stay_appear_once_despite_changes(
            keys in btree_set(arb_key(), 0..30),
            changes in vec((vec(arb_key(), 0..3), vec(any::<prop::sample::Index>(), 0..3)), 0..10),
            page_size in 1i32..6,
        ) {
            let mut removed: BTreeSet<String> = BTreeSet::new();
            let mut added: BTreeSet<String> = BTreeSet::new();
            let seen = list_all(keys.clone(), page_size, |i, current| {
                if let Some((add, remove)) = changes.get(i) {
                    for r in remove {
                        if !current.is_empty() {
                            let k = current.iter().nth(r.index(current.len())).unwrap().clone();
                            current.remove(&k);
                            removed.insert(k);
                        }
                    }
                    for a in add {
                        if current.insert(a.clone()) {
                            added.insert(a.clone());
                        }
                    }
                }
            })?;
            let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
            for k in &seen {
                *counts.entry(k).or_default() += 1;
            }
            prop_assert!(counts.values().all(|c| *c == 1), "duplicates in {:?}", seen);
            for k in keys.iter().filter(|k| !removed.contains(*k)) {
                prop_assert!(counts.contains_key(k), "{:?} stayed and was not listed", k);
            }
            for k in counts.keys() {
                prop_assert!(keys.contains(*k) || added.contains(*k));
            }
        }

        #[test]
        fn tokens_round_trip(key in any::<String>()) {
            prop_assert_eq!(decode(&encode(&key)), Some(key));
        }

        /// A token is refused or read as the one token for its key (hex
        /// digits in either case).
        #[test]
        fn any_token_is_refused_or_read_without_panicking(
            token in prop_oneof![
                "k1\\.[0-9a-fA-F]{0,8}",
                "k1\\.[0-9a-f+ é-]{0,8}",
                any::<String>(),
            ],
        ) {
            if token.is_empty() {
                return Ok(()); // the first page
            }
            match decode(&token) {
                Some(key) => prop_assert_eq!(encode(&key), token.to_ascii_lowercase()),
                None => {
                    let err = page(vec!["a".to_owned()], |k| k.clone(), 1, &token).unwrap_err();
                    prop_assert_eq!(err.field, "page_token");
                }
            }
        }

        #[test]
        fn negative_page_sizes_are_named(size in i32::MIN..0) {
            let err = page(vec!["a".to_owned()], |k| k.clone(), size, "").unwrap_err();
            prop_assert_eq!(err.field, "page_size");
        }
    }
}
