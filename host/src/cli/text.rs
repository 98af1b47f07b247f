//! Text for people: what the table printers show of strings that come from
//! manifests, providers or sysfs, with control characters escaped so that
//! an ANSI escape in a pod name or a provider's reason cannot drive the
//! terminal.

use std::borrow::Cow;

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if bad(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One table field: every control character escaped (`\u{1b}`, `\n`, `\t`).
pub fn field(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// A block of lines: control characters escaped, newlines kept.
pub fn lines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(field("plain é"), "plain é");
        assert!(matches!(field("plain"), Cow::Borrowed(_)));
        assert_eq!(field("red\u{1b}[31m\tx\ny"), "red\\u{1b}[31m\\tx\\ny");
        assert_eq!(lines("a\u{7}\nb"), "a\\u{7}\nb");
    }
}
