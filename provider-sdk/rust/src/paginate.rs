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
    let hex = token.strip_prefix(TOKEN_PREFIX)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
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
