use proptest::prelude::*;

use super::ignored::severity;
use super::*;
use crate::arb;

proptest! {
    /// `--master` is checked when parsed and used later with
    /// `expect`: whatever the check accepts must never panic there.
    #[test]
    fn an_accepted_master_url_is_a_uri(
        s in prop_oneof!["(https?|ftp)://[a-z0-9.:@/%\\[\\]-]{0,20}", arb::text()],
    ) {
        if master_url(&s).is_ok() {
            let uri = master_uri(&s);
            prop_assert!(uri.host().is_some());
        }
    }

    #[test]
    fn flags_parse_or_fail_without_panicking(s in arb::text()) {
        prop_assert_eq!(go_bool(&s).is_ok(), ["1", "t", "T", "true", "TRUE", "True", "0", "f", "F", "false", "FALSE", "False"].contains(&s.as_str()));
        let _ = feature_gate(&s);
        let _ = severity(&s);
    }
}
