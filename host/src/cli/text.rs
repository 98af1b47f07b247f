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

/// Rows of cells printed as columns: every column as wide as its widest
/// cell (so long pod names keep the columns aligned), one space between
/// columns, the last cell of a row unpadded. A row may have fewer cells
/// than the header (a rejected pod's reason takes the rest of its line).
#[derive(Debug, Default)]
pub struct Columns {
    rows: Vec<Vec<String>>,
}

impl Columns {
    /// A table whose first row is `header`.
    pub fn new(header: &[&str]) -> Columns {
        Columns {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Add a row (cells already escaped with [`field`]).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, one line per row.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            // The last cell of a row is not padded, so it does not widen its column.
            for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
                let w = cell.chars().count();
                match widths.get_mut(i) {
                    Some(max) => *max = (*max).max(w),
                    None => widths.push(w),
                }
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Columns::new(&["POD", "QOS", "CPUS"]);
        t.row(vec![
            "default/a-very-long-pod-name-indeed".into(),
            "Guaranteed".into(),
            "2-3*".into(),
        ]);
        t.row(vec!["ns/b".into(), "BestEffort".into(), "0-15".into()]);
        t.row(vec!["ns/rejected".into(), "Burstable".into()]);
        t.row(vec!["ns/ü".into(), "-".into(), "-".into()]);
        assert_eq!(
            t.render(),
            "\
POD                                 QOS        CPUS
default/a-very-long-pod-name-indeed Guaranteed 2-3*
ns/b                                BestEffort 0-15
ns/rejected                         Burstable
ns/ü                                -          -
"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(field("plain é"), "plain é");
        assert!(matches!(field("plain"), Cow::Borrowed(_)));
        assert_eq!(field("red\u{1b}[31m\tx\ny"), "red\\u{1b}[31m\\tx\\ny");
        assert_eq!(lines("a\u{7}\nb"), "a\\u{7}\nb");
    }
}
