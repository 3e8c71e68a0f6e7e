//! Label selectors in kubectl's `-l` syntax, for `--provider-node-selector`
//! and `--provider-load-balancer-backends NAME=selector:…`.
//!
//! kube-core's `Selector` matches labels but has no parser for the string
//! form, so the grammar is parsed here into its `Expression`s and matched
//! by kube-core.

use std::collections::BTreeMap;

use ccm_provider_sdk::validate;
use kube::core::{Expression, Selector, SelectorExt};

/// A parsed label selector; `Display` gives back a canonical form.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelSelector {
    text: String,
    selector: Selector,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid label selector {selector:?}: {why}")]
pub struct SelectorError {
    pub selector: String,
    pub why: String,
}

impl LabelSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)` and
    /// `k notin (a,b)`, joined by commas (all must hold). An empty string
    /// is refused: a selector that selects everything is a mistake here.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let err = |why: &str| SelectorError {
            selector: s.to_owned(),
            why: why.to_owned(),
        };
        let mut exprs = Vec::new();
        for term in split_terms(s).map_err(|w| err(&w))? {
            let term = term.trim();
            if term.is_empty() {
                return Err(err("empty requirement"));
            }
            exprs.push(parse_term(term).map_err(|w| err(&w))?);
        }
        if exprs.is_empty() {
            return Err(err("empty selector"));
        }
        Ok(LabelSelector {
            text: s.trim().to_owned(),
            selector: Selector::from_iter(exprs),
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    if !s.trim().is_empty() {
        out.push(&s[start..]);
    }
    Ok(out)
}

fn parse_term(t: &str) -> Result<Expression, String> {
    if let Some(k) = t.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key(k)?));
    }
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Expression::NotEqual(key(k)?, value(v)?));
    }
    if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
        return Ok(Expression::Equal(key(k)?, value(v)?));
    }
    for (op, not) in [(" notin ", true), (" in ", false)] {
        if let Some((k, set)) = t.split_once(op) {
            let set = set
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("{:?} needs a parenthesised set", op.trim()))?;
            let values = set
                .split(',')
                .map(value)
                .collect::<Result<std::collections::BTreeSet<_>, _>>()?;
            let k = key(k)?;
            return Ok(if not {
                Expression::NotIn(k, values)
            } else {
                Expression::In(k, values)
            });
        }
    }
    Ok(Expression::Exists(key(t)?))
}

/// A label key (an optional DNS-subdomain prefix and `/`, then a name),
/// as the contract's validation checks it.
fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    validate::label_key("", k).map_err(|v| v.problem)?;
    Ok(k.to_owned())
}

/// A label value (possibly empty), as the contract's validation checks it.
fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    validate::label_value("", v).map_err(|v| v.problem)?;
    Ok(v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator_matches_as_kubectl_does() {
        let l = labels(&[("zone", "a"), ("example.com/pool", "gpu")]);
        let cases = [
            ("zone=a", true),
            ("zone==a", true),
            ("zone=b", false),
            ("zone!=b", true),
            ("zone!=a", false),
            ("zone", true),
            ("!zone", false),
            ("!missing", true),
            ("zone in (a,b)", true),
            ("zone in (b, c)", false),
            ("zone notin (b,c)", true),
            ("missing notin (b)", true),
            ("zone=a,example.com/pool=gpu", true),
            ("zone=a, example.com/pool in (cpu)", false),
        ];
        for (s, want) in cases {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&l), want, "{s}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_reason() {
        for s in [
            "",
            " ",
            "zone=a,",
            "zone in a,b",
            "zone in (a",
            "Bad_/x=y",
            "zone=a b",
            "-x",
        ] {
            let e = LabelSelector::parse(s).unwrap_err();
            assert_eq!(e.selector, s);
            assert!(!e.why.is_empty());
        }
    }
}
