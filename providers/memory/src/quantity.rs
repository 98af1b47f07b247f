//! Kubernetes memory quantities (`1Gi`, `512Mi`, `1.5G`, `1e9`), parsed to
//! whole bytes, and the canonical binary spelling of byte sizes (`2Mi`).
//!
//! Providers must not depend on the host crate, so this is a small
//! re-implementation of the host's algorithm (apimachinery's
//! `resource.Quantity` grammar) restricted to what reserved memory needs:
//! a non-negative decimal number (`2`, `0.5`, `.5`, `1.`, `+3`) followed by an
//! optional suffix — decimal SI (`m`, `k`, `M`, `G`, `T`, `P`, `E`), binary SI
//! (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`) or a decimal exponent (`e3`, `E-2`).
//! The value is rounded *up* to a whole byte, as `Quantity.Value()` does.
//! Errors rather than silent changes: negative values, values above 2^63-1,
//! more than 36 significant digits.

use std::fmt;

/// The largest value Kubernetes can represent: 2^63 - 1.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a number followed by an optional known suffix.
    #[error(
        "invalid quantity {0:?}: expected a number with an optional suffix \
         (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, m or an exponent such as e9), e.g. \"1Gi\""
    )]
    Format(String),
    /// A negative amount.
    #[error("invalid quantity {0:?}: memory cannot be negative")]
    Negative(String),
    /// Above 2^63-1 bytes or too many digits to compute exactly.
    #[error("invalid quantity {0:?}: larger than the largest Kubernetes quantity (2^63-1 bytes)")]
    TooLarge(String),
}

/// Parses a memory quantity into bytes, rounding a fractional byte up.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let fmt_err = || QuantityError::Format(text.to_owned());
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
        None => return Err(fmt_err()),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(fmt_err());
    }
    // (power of ten, power of two)
    let (exp10, exp2): (i64, u32) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) && s.len() > 1 => {
            let e: i64 = s[1..].parse().map_err(|_| fmt_err())?;
            if !(-64..=64).contains(&e) {
                return Err(if e > 0 {
                    QuantityError::TooLarge(text.to_owned())
                } else {
                    fmt_err()
                });
            }
            (e, 0)
        }
        _ => return Err(fmt_err()),
    };
    let digits: String = format!("{int_part}{frac_part}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(text.to_owned()));
    }
    if significant.len() > 36 {
        return Err(QuantityError::TooLarge(text.to_owned()));
    }
    let too_large = || QuantityError::TooLarge(text.to_owned());
    let mantissa: u128 = significant.parse().map_err(|_| fmt_err())?;
    let scaled = mantissa.checked_shl(exp2).ok_or_else(too_large)?;
    if scaled >> exp2 != mantissa {
        return Err(too_large());
    }
    let exp = exp10 - frac_part.len() as i64;
    let value = if exp >= 0 {
        let mut v = scaled;
        for _ in 0..exp {
            v = v.checked_mul(10).ok_or_else(too_large)?;
        }
        v
    } else {
        let mut div: u128 = 1;
        for _ in 0..(-exp) {
            match div.checked_mul(10) {
                Some(d) => div = d,
                // The divisor exceeds any 36-digit mantissa: a fraction of a byte.
                None => return Ok(1),
            }
        }
        scaled.div_ceil(div)
    };
    if value > u128::from(MAX_BYTES) {
        return Err(too_large());
    }
    Ok(value as u64)
}

/// A byte count in the canonical binary-SI spelling Kubernetes uses for
/// `resource.NewQuantity(n, BinarySI).String()`: the largest binary suffix
/// that divides it exactly (`2097152` -> `2Mi`), plain digits otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        let mut v = self.0;
        let mut unit = None;
        if v != 0 {
            for s in SUFFIXES {
                if !v.is_multiple_of(1024) {
                    break;
                }
                v /= 1024;
                unit = Some(s);
            }
        }
        match unit {
            Some(s) => write!(f, "{v}{s}"),
            None => write!(f, "{v}"),
        }
    }
}

/// The Kubernetes resource name of a hugepage size given in bytes
/// (`2097152` -> `hugepages-2Mi`), as `HugePageResourceName` spells it.
pub fn hugepage_resource_name(page_bytes: u64) -> String {
    format!("hugepages-{}", Bytes(page_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_kubernetes_value() {
        let cases: &[(&str, u64)] = &[
            ("1Gi", 1 << 30),
            ("512Mi", 512 << 20),
            ("1G", 1_000_000_000),
            ("1e9", 1_000_000_000),
            ("1E3", 1000),
            ("1.5Gi", 3 << 29),
            ("0.5Ki", 512),
            (".5Ki", 512),
            ("1.", 1),
            ("+3", 3),
            ("1500m", 2),
            ("1m", 1),
            ("0", 0),
            ("-0", 0),
            ("007", 7),
            ("1.0001", 2),
            ("2e-1", 1),
            ("7Ei", 7 << 60),
        ];
        for (text, want) in cases {
            assert_eq!(parse_bytes(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn errors_name_the_text() {
        assert_eq!(
            parse_bytes("8Ei").unwrap_err().to_string(),
            "invalid quantity \"8Ei\": larger than the largest Kubernetes quantity (2^63-1 bytes)"
        );
        assert_eq!(
            parse_bytes("-1Gi").unwrap_err().to_string(),
            "invalid quantity \"-1Gi\": memory cannot be negative"
        );
        assert!(matches!(parse_bytes("1GB"), Err(QuantityError::Format(_))));
        assert!(matches!(parse_bytes(""), Err(QuantityError::Format(_))));
        assert!(matches!(parse_bytes("."), Err(QuantityError::Format(_))));
        assert!(matches!(
            parse_bytes("1.2.3"),
            Err(QuantityError::Format(_))
        ));
        assert!(matches!(parse_bytes("Gi"), Err(QuantityError::Format(_))));
    }

    #[test]
    fn canonical_binary_names() {
        assert_eq!(hugepage_resource_name(2048 * 1024), "hugepages-2Mi");
        assert_eq!(hugepage_resource_name(1048576 * 1024), "hugepages-1Gi");
        assert_eq!(hugepage_resource_name(64 * 1024), "hugepages-64Ki");
        assert_eq!(hugepage_resource_name(16 << 30), "hugepages-16Gi");
        assert_eq!(Bytes(1536 << 10).to_string(), "1536Ki");
        assert_eq!(Bytes(1000).to_string(), "1000");
        assert_eq!(Bytes(0).to_string(), "0");
        assert_eq!(Bytes(6 << 30).to_string(), "6Gi");
    }
}
