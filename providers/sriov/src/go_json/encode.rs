//! Writing JSON byte for byte as Go's `json.Marshal` writes the device
//! plugin's `…_INFO` variable: no spaces, map keys sorted by bytes, and Go's
//! HTML-safe string escaping (`<`, `>`, `&`, U+2028 and U+2029 as `\u…`
//! escapes; `\b \f \n \r \t` short forms; other control characters as
//! `\u00xx`).

use std::collections::BTreeMap;

/// Append `s` as a JSON string the way Go's `json.Marshal` writes it.
pub fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\u{0}'..='\u{1f}' => {
                let n = c as u32;
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(char::from(HEX[((n >> shift) & 0xf) as usize]));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Append a string-keyed map as a JSON object, keys in byte order (Go sorts
/// map keys that way), each value written by `value`.
pub fn write_map<V>(
    out: &mut String,
    map: &BTreeMap<String, V>,
    mut value: impl FnMut(&mut String, &V),
) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, k);
        out.push(':');
        value(out, v);
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> String {
        let mut out = String::new();
        write_string(&mut out, s);
        out
    }

    #[test]
    fn strings_are_escaped_like_go() {
        // Expected texts are what Go 1.22+ json.Marshal prints for the input.
        let table = [
            ("plain", r#""plain""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("\u{8}\u{c}\n\r\t", r#""\b\f\n\r\t""#),
            ("\u{0}\u{1}\u{1f}", r#""\u0000\u0001\u001f""#),
            (
                "<a href='x'>&</a>",
                r#""\u003ca href='x'\u003e\u0026\u003c/a\u003e""#,
            ),
            ("\u{2028}\u{2029}", r#""\u2028\u2029""#),
            ("\u{7f}é€😀", "\"\u{7f}é€😀\""),
            ("/dev/vfio/12", r#""/dev/vfio/12""#),
        ];
        for (input, want) in table {
            assert_eq!(string(input), want, "{input:?}");
        }
    }

    #[test]
    fn maps_are_sorted_by_bytes_without_spaces() {
        let map: BTreeMap<String, String> = [("b", "2"), ("B", "1"), ("a", "<")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let mut out = String::new();
        write_map(&mut out, &map, |o, v| write_string(o, v));
        assert_eq!(out, r#"{"B":"1","a":"\u003c","b":"2"}"#);
        let mut out = String::new();
        write_map(&mut out, &BTreeMap::<String, String>::new(), |o, v| {
            write_string(o, v)
        });
        assert_eq!(out, "{}");
    }
}
