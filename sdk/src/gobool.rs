//! [`parse_go_bool`]: booleans spelled the way the kubelet reads its options.

/// Go's `strconv.ParseBool`, which the kubelet uses for boolean policy
/// options: `1 t T TRUE true True` are true, `0 f F FALSE false False` are
/// false, anything else (`yes`, `on`, `tRUE`, ` true`) is `None`.
///
/// ```
/// use topomgr_sdk::parse_go_bool;
/// assert_eq!(parse_go_bool("True"), Some(true));
/// assert_eq!(parse_go_bool("F"), Some(false));
/// assert_eq!(parse_go_bool("yes"), None);
/// ```
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_go_bool;

    #[test]
    fn exactly_gos_spellings() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        for bad in [
            "", "yes", "no", "on", "tRUE", "fALSE", " true", "true ", "2", "+1",
        ] {
            assert_eq!(parse_go_bool(bad), None, "{bad:?}");
        }
    }
}
