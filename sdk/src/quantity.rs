//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`, `1e3`), parsed the way
//! apimachinery's `resource.Quantity` parses them, with exact integer arithmetic.
//!
//! # Semantics
//!
//! A quantity is a signed decimal number (`2`, `0.5`, `.5`, `1.`, `+3`, `007`)
//! followed by an optional suffix:
//!
//! - decimal SI: `n` (10^-9), `u` (10^-6), `m` (10^-3), none, `k` (10^3),
//!   `M` (10^6), `G` (10^9), `T` (10^12), `P` (10^15), `E` (10^18);
//! - binary SI: `Ki` (2^10), `Mi` (2^20), `Gi` (2^30), `Ti` (2^40), `Pi` (2^50),
//!   `Ei` (2^60);
//! - a decimal exponent: `e3`, `E3`, `e-3`, `E+3`.
//!
//! Like Kubernetes, a parsed value is rounded *up* to a whole number of
//! nano-units (10^-9), so a request for a tiny amount of something is never
//! rounded away to nothing. [`Quantity::milli_value`] and [`Quantity::value`]
//! round up again, like Go's `MilliValue()` and `Value()`.
//!
//! The scanner reproduces apimachinery's, quirks included: the exact text `0`
//! and a sign or a point with no digits (`+`, `-`, `.`) read as zero, a point
//! with no digits after it (`1.`, `1.G`) is accepted, and `-0` is zero rather
//! than negative. It differs from Kubernetes on purpose in three places, all of
//! which are errors here instead of silent changes of value:
//!
//! - values above 2^63-1 are an error ([`QuantityError::TooLarge`]); Kubernetes
//!   silently caps them at 2^63-1;
//! - an exponent outside the 32-bit range (`1e99999999999`) is an error;
//!   Kubernetes truncates it to 32 bits;
//! - negative values are an error ([`QuantityError::Negative`]): no resource
//!   request or limit may be negative.
//!
//! Leading and trailing whitespace is not part of the grammar (Kubernetes'
//! JSON decoder trims it before parsing; topomgr's manifest reader does the same).
//!
//! # Why not the `kube_quantity` crate
//!
//! `kube_quantity` converts to and from `k8s-openapi` types, which pulls in the
//! whole generated Kubernetes API (a very large crate that dominates build
//! time), and it works on floating-point/decimal values rather than reproducing
//! Kubernetes' round-up rules bit for bit. The grammar is small, so the SDK
//! implements it here with exact integer arithmetic.

use std::fmt;
use std::str::FromStr;

/// The largest value Kubernetes can represent: 2^63 - 1.
pub const MAX_VALUE: u64 = i64::MAX as u64;

/// Nano-units per unit.
const NANOS_PER_UNIT: u128 = 1_000_000_000;

/// Nano-units per milli-unit.
const NANOS_PER_MILLI: u128 = 1_000_000;

/// The largest value in nano-units: [`MAX_VALUE`] whole units.
const MAX_NANOS: u128 = MAX_VALUE as u128 * NANOS_PER_UNIT;

/// Why a quantity could not be parsed or converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is empty.
    #[error("invalid quantity \"\": the quantity is empty")]
    Empty,
    /// The text is not a number followed by an optional suffix.
    #[error("invalid quantity {text:?}")]
    Format {
        /// The text as given.
        text: String,
    },
    /// The number is followed by something that is not a known suffix.
    #[error(
        "invalid quantity {text:?}: unknown suffix {suffix:?} (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
    )]
    Suffix {
        /// The text as given.
        text: String,
        /// The suffix that is not known.
        suffix: String,
    },
    /// The decimal exponent does not fit in 32 bits.
    #[error("invalid quantity {text:?}: exponent out of range")]
    Exponent {
        /// The text as given.
        text: String,
    },
    /// The value is below zero.
    #[error("invalid quantity {text:?}: must not be negative")]
    Negative {
        /// The text as given.
        text: String,
    },
    /// The value is above 2^63-1.
    #[error(
        "invalid quantity {text:?}: larger than 9223372036854775807, the largest quantity Kubernetes can represent"
    )]
    TooLarge {
        /// The text as given.
        text: String,
    },
    /// The value is representable, but in millicores it is above 2^63-1.
    #[error(
        "invalid quantity {text:?}: {millicores} millicores is larger than 9223372036854775807, the largest amount of CPU Kubernetes can represent"
    )]
    TooManyMillicores {
        /// The text as given.
        text: String,
        /// The value in millicores.
        millicores: u128,
    },
}

/// A non-negative Kubernetes quantity, held exactly as Kubernetes holds it:
/// rounded up to whole nano-units, at most 2^63-1 units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: u128,
}

impl Quantity {
    /// The zero quantity.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parse `text` (no surrounding whitespace) as a quantity.
    ///
    /// ```
    /// use topomgr_sdk::quantity::Quantity;
    /// assert_eq!(Quantity::parse("1.5Gi").unwrap().value(), 1_610_612_736);
    /// assert_eq!(Quantity::parse("250m").unwrap().milli_value(), Some(250));
    /// ```
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let parts = scan(text).ok_or_else(|| QuantityError::Format {
            text: text.to_string(),
        })?;
        let (exp10, exp2) = interpret_suffix(text, parts.suffix)?;
        let digits = digits_without_leading_zeros(parts.integer, parts.fraction);
        if digits.is_empty() {
            return Ok(Quantity::ZERO);
        }
        if parts.negative {
            return Err(QuantityError::Negative {
                text: text.to_string(),
            });
        }
        let fraction_len = i64::try_from(parts.fraction.len()).unwrap_or(i64::MAX);
        let exp10 = i64::from(exp10).saturating_sub(fraction_len);
        let nanos = scaled_round_up(digits, exp10, exp2)
            .filter(|n| *n <= MAX_NANOS)
            .ok_or_else(|| QuantityError::TooLarge {
                text: text.to_string(),
            })?;
        Ok(Quantity { nanos })
    }

    /// The quantity with exactly `nanos` nano-units, or `None` above 2^63-1 units.
    pub fn from_nanos(nanos: u128) -> Option<Quantity> {
        (nanos <= MAX_NANOS).then_some(Quantity { nanos })
    }

    /// The value in nano-units (exact).
    pub fn nanos(self) -> u128 {
        self.nanos
    }

    /// Whether the quantity is zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// The value in whole units, rounded up (Go's `Value()`). Always at most 2^63-1.
    pub fn value(self) -> u64 {
        let units = self.nanos.div_ceil(NANOS_PER_UNIT);
        // `nanos <= MAX_NANOS` is an invariant, so `units <= MAX_VALUE`.
        u64::try_from(units).unwrap_or(MAX_VALUE)
    }

    /// The value in milli-units, rounded up (Go's `MilliValue()`), or `None`
    /// when that is above 2^63-1 (Go would overflow).
    pub fn milli_value(self) -> Option<u64> {
        u64::try_from(self.millis_exact())
            .ok()
            .filter(|m| *m <= MAX_VALUE)
    }

    fn millis_exact(self) -> u128 {
        self.nanos.div_ceil(NANOS_PER_MILLI)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// Prints the exact value in plain decimal (`1.5`, `0.000000001`, `1024`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = self.nanos / NANOS_PER_UNIT;
        let frac = self.nanos % NANOS_PER_UNIT;
        if frac == 0 {
            write!(f, "{units}")
        } else {
            let digits = format!("{frac:09}");
            write!(f, "{units}.{}", digits.trim_end_matches('0'))
        }
    }
}

/// The amount topomgr records for `resource` in a [`crate::ResourceList`]:
/// `cpu` in millicores (rounded up), everything else (memory and hugepages in
/// bytes, devices as counts) in whole units (rounded up).
pub fn resource_amount(
    resource: &str,
    quantity: Quantity,
    text: &str,
) -> Result<u64, QuantityError> {
    if resource == "cpu" {
        quantity
            .milli_value()
            .ok_or_else(|| QuantityError::TooManyMillicores {
                text: text.to_string(),
                millicores: quantity.millis_exact(),
            })
    } else {
        Ok(quantity.value())
    }
}

/// Parse `text` and convert it with [`resource_amount`].
///
/// ```
/// use topomgr_sdk::quantity::parse_resource_amount;
/// assert_eq!(parse_resource_amount("cpu", "1.5").unwrap(), 1500);
/// assert_eq!(parse_resource_amount("memory", "1Ki").unwrap(), 1024);
/// ```
pub fn parse_resource_amount(resource: &str, text: &str) -> Result<u64, QuantityError> {
    resource_amount(resource, Quantity::parse(text)?, text)
}

/// A byte count in the spelling Kubernetes gives
/// `resource.NewQuantity(n, BinarySI).String()`: the largest binary suffix
/// that divides it exactly (`2097152` -> `2Mi`), plain digits otherwise.
///
/// ```
/// use topomgr_sdk::quantity::BinarySi;
/// assert_eq!(BinarySi(2 << 20).to_string(), "2Mi");
/// assert_eq!(BinarySi(1536 << 10).to_string(), "1536Ki");
/// assert_eq!(BinarySi(1000).to_string(), "1000");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinarySi(pub u64);

impl fmt::Display for BinarySi {
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

/// The Kubernetes resource name of hugepages of `page_bytes` bytes
/// (`2097152` -> `hugepages-2Mi`), as `HugePageResourceName` spells it.
///
/// ```
/// use topomgr_sdk::quantity::hugepage_resource_name;
/// assert_eq!(hugepage_resource_name(1 << 30), "hugepages-1Gi");
/// ```
pub fn hugepage_resource_name(page_bytes: u64) -> String {
    format!("hugepages-{}", BinarySi(page_bytes))
}

/// The pieces of a quantity's text, as apimachinery's scanner splits it.
struct Parts<'a> {
    negative: bool,
    integer: &'a str,
    fraction: &'a str,
    suffix: &'a str,
}

/// Split `text` into sign, integer digits, fraction digits and suffix, with
/// apimachinery's rules. `None` when the text does not have that shape.
fn scan(text: &str) -> Option<Parts<'_>> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut negative = false;
    match bytes.first() {
        Some(b'-') => {
            negative = true;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let digits_end = |from: usize| {
        bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(end, |i| from + i)
    };
    let integer_end = digits_end(pos);
    let integer = &text[pos..integer_end];
    pos = integer_end;
    let mut fraction = "";
    if bytes.get(pos) == Some(&b'.') {
        let fraction_end = digits_end(pos + 1);
        fraction = &text[pos + 1..fraction_end];
        pos = fraction_end;
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    if digits_end(pos) != end {
        return None;
    }
    Some(Parts {
        negative,
        integer,
        fraction,
        suffix: &text[suffix_start..],
    })
}

/// The (power of ten, power of two) a suffix stands for.
fn interpret_suffix(text: &str, suffix: &str) -> Result<(i32, u32), QuantityError> {
    let known = match suffix {
        "n" => Some((-9, 0)),
        "u" => Some((-6, 0)),
        "m" => Some((-3, 0)),
        "" => Some((0, 0)),
        "k" => Some((3, 0)),
        "M" => Some((6, 0)),
        "G" => Some((9, 0)),
        "T" => Some((12, 0)),
        "P" => Some((15, 0)),
        "E" => Some((18, 0)),
        "Ki" => Some((0, 10)),
        "Mi" => Some((0, 20)),
        "Gi" => Some((0, 30)),
        "Ti" => Some((0, 40)),
        "Pi" => Some((0, 50)),
        "Ei" => Some((0, 60)),
        _ => None,
    };
    if let Some(k) = known {
        return Ok(k);
    }
    let unknown = || QuantityError::Suffix {
        text: text.to_string(),
        suffix: suffix.to_string(),
    };
    let exponent = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or_else(unknown)?;
    let unsigned = exponent
        .strip_prefix('+')
        .or_else(|| exponent.strip_prefix('-'))
        .unwrap_or(exponent);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    let value: i32 = exponent.parse().map_err(|_| QuantityError::Exponent {
        text: text.to_string(),
    })?;
    Ok((value, 0))
}

/// The significant decimal digits of `integer` and `fraction` together, as
/// numbers 0..=9, without leading zeros (empty for zero).
fn digits_without_leading_zeros(integer: &str, fraction: &str) -> Vec<u8> {
    integer
        .bytes()
        .chain(fraction.bytes())
        .map(|b| b - b'0')
        .skip_while(|d| *d == 0)
        .collect()
}

/// `ceil(digits * 10^(exp10 + 9) * 2^exp2)`: the value in nano-units, rounded
/// up. `None` when it does not fit in `u128` (always above [`MAX_NANOS`]).
fn scaled_round_up(mut digits: Vec<u8>, exp10: i64, exp2: u32) -> Option<u128> {
    for _ in 0..exp2 {
        double_decimal(&mut digits);
    }
    let shift = exp10.saturating_add(9);
    if shift >= 0 {
        // More than 39 digits never fit in u128.
        let total_digits = u64::try_from(digits.len())
            .ok()?
            .checked_add(shift.unsigned_abs())?;
        if total_digits > 39 {
            return None;
        }
        let mut value = digits_to_u128(&digits)?;
        for _ in 0..shift {
            value = value.checked_mul(10)?;
        }
        Some(value)
    } else {
        let dropped = usize::try_from(shift.unsigned_abs()).unwrap_or(usize::MAX);
        let kept = digits.len().saturating_sub(dropped);
        let (head, tail) = digits.split_at(kept);
        let round_up = tail.iter().any(|d| *d != 0);
        let value = if head.len() > 39 {
            return None;
        } else {
            digits_to_u128(head)?
        };
        value.checked_add(u128::from(round_up))
    }
}

/// Multiply a big-endian decimal digit vector by two in place.
fn double_decimal(digits: &mut Vec<u8>) {
    let mut carry = 0u8;
    for d in digits.iter_mut().rev() {
        let v = *d * 2 + carry;
        *d = v % 10;
        carry = v / 10;
    }
    if carry > 0 {
        digits.insert(0, carry);
    }
}

/// A big-endian decimal digit slice as a number, `None` on overflow.
fn digits_to_u128(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, d| {
        acc.checked_mul(10)?.checked_add(u128::from(*d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_si_names() {
        assert_eq!(hugepage_resource_name(2048 * 1024), "hugepages-2Mi");
        assert_eq!(hugepage_resource_name(1048576 * 1024), "hugepages-1Gi");
        assert_eq!(hugepage_resource_name(64 * 1024), "hugepages-64Ki");
        assert_eq!(hugepage_resource_name(16 << 30), "hugepages-16Gi");
        assert_eq!(BinarySi(0).to_string(), "0");
        assert_eq!(BinarySi(6 << 30).to_string(), "6Gi");
        assert_eq!(BinarySi(7 << 60).to_string(), "7Ei");
    }

    fn nanos(text: &str) -> u128 {
        match Quantity::parse(text) {
            Ok(q) => q.nanos(),
            Err(e) => panic!("{text:?} should parse: {e}"),
        }
    }

    #[test]
    fn parses_like_apimachinery() {
        let table: &[(&str, u128)] = &[
            ("0", 0),
            ("00", 0),
            ("-0", 0),
            ("+0", 0),
            ("0.0", 0),
            ("-0.0Gi", 0),
            ("+", 0),
            ("-", 0),
            (".", 0),
            ("1", 1_000_000_000),
            ("+1", 1_000_000_000),
            ("007", 7_000_000_000),
            ("2", 2_000_000_000),
            ("0.5", 500_000_000),
            (".5", 500_000_000),
            ("1.", 1_000_000_000),
            ("1.G", 1_000_000_000_000_000_000),
            ("1.5", 1_500_000_000),
            ("100m", 100_000_000),
            ("1n", 1),
            ("1u", 1_000),
            ("1m", 1_000_000),
            ("1k", 1_000_000_000_000),
            ("1M", 1_000_000_000_000_000),
            ("1G", 1_000_000_000_000_000_000),
            ("1T", 1_000_000_000_000_000_000_000),
            ("1P", 1_000_000_000_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000_000_000_000),
            ("1Ki", 1_024_000_000_000),
            ("1Mi", 1_048_576_000_000_000),
            ("1Gi", 1_073_741_824_000_000_000),
            ("1Ti", 1_099_511_627_776_000_000_000),
            ("1Pi", 1_125_899_906_842_624_000_000_000),
            ("1Ei", 1_152_921_504_606_846_976_000_000_000),
            ("1.5Gi", 1_610_612_736_000_000_000),
            ("0.1Ki", 102_400_000_000),
            ("1e3", 1_000_000_000_000),
            ("1E3", 1_000_000_000_000),
            ("1e+3", 1_000_000_000_000),
            ("1e-3", 1_000_000),
            ("1.5e1", 15_000_000_000),
            ("12e-10", 2),
            ("0.1n", 1),
            ("0.0000000001", 1),
            ("0.0000000011", 2),
            ("0.0000000001Ki", 103),
            ("1e-400", 1),
            ("9223372036854775807", MAX_NANOS),
            ("7Ei", 7 * 1_152_921_504_606_846_976_000_000_000),
        ];
        for (text, want) in table {
            assert_eq!(nanos(text), *want, "{text}");
        }
    }

    #[test]
    fn converts_like_value_and_milli_value() {
        let table: &[(&str, u64, u64)] = &[
            ("0", 0, 0),
            ("1", 1, 1000),
            ("1.5", 2, 1500),
            ("100m", 1, 100),
            ("1500m", 2, 1500),
            ("0.0001", 1, 1),
            ("1n", 1, 1),
            ("1Gi", 1_073_741_824, 1_073_741_824_000),
            ("0.1Ki", 103, 102_400),
            ("2.5e-1", 1, 250),
        ];
        for (text, value, milli) in table {
            let q = Quantity::parse(text).expect("valid");
            assert_eq!(q.value(), *value, "value of {text}");
            assert_eq!(q.milli_value(), Some(*milli), "milli of {text}");
        }
        assert_eq!(Quantity::parse("1E").expect("valid").milli_value(), None);
        assert_eq!(
            Quantity::parse("9223372036854775807")
                .expect("valid")
                .value(),
            MAX_VALUE
        );
    }

    #[test]
    fn resource_amounts() {
        assert_eq!(parse_resource_amount("cpu", "2"), Ok(2000));
        assert_eq!(parse_resource_amount("cpu", "250m"), Ok(250));
        assert_eq!(parse_resource_amount("cpu", "0.0001"), Ok(1));
        assert_eq!(parse_resource_amount("memory", "1Gi"), Ok(1_073_741_824));
        assert_eq!(parse_resource_amount("memory", "1.5"), Ok(2));
        assert_eq!(parse_resource_amount("hugepages-2Mi", "4Mi"), Ok(4_194_304));
        assert_eq!(parse_resource_amount("example.com/widget", "3"), Ok(3));
        assert_eq!(
            parse_resource_amount("memory", "1E"),
            Ok(1_000_000_000_000_000_000)
        );
        assert_eq!(
            parse_resource_amount("cpu", "10P").map_err(|e| e.to_string()),
            Err("invalid quantity \"10P\": 10000000000000000000 millicores is larger than 9223372036854775807, the largest amount of CPU Kubernetes can represent".to_string())
        );
    }

    #[test]
    fn errors_name_the_text() {
        let table: &[(&str, &str)] = &[
            ("", "invalid quantity \"\": the quantity is empty"),
            ("1.5.3", "invalid quantity \"1.5.3\""),
            ("abc", "invalid quantity \"abc\""),
            (" 1", "invalid quantity \" 1\""),
            ("1 ", "invalid quantity \"1 \""),
            ("1e3i", "invalid quantity \"1e3i\""),
            ("0x10", "invalid quantity \"0x10\""),
            ("--1", "invalid quantity \"--1\": unknown suffix \"-1\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1K", "invalid quantity \"1K\": unknown suffix \"K\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("0K", "invalid quantity \"0K\": unknown suffix \"K\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1mi", "invalid quantity \"1mi\": unknown suffix \"mi\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1e", "invalid quantity \"1e\": unknown suffix \"e\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1e+", "invalid quantity \"1e+\": unknown suffix \"e+\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1Mi3", "invalid quantity \"1Mi3\": unknown suffix \"Mi3\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1e99999999999", "invalid quantity \"1e99999999999\": exponent out of range"),
            ("-1", "invalid quantity \"-1\": must not be negative"),
            ("-0.000000000001", "invalid quantity \"-0.000000000001\": must not be negative"),
            ("-1Gi", "invalid quantity \"-1Gi\": must not be negative"),
            ("9223372036854775808", "invalid quantity \"9223372036854775808\": larger than 9223372036854775807, the largest quantity Kubernetes can represent"),
            ("8Ei", "invalid quantity \"8Ei\": larger than 9223372036854775807, the largest quantity Kubernetes can represent"),
            ("10E", "invalid quantity \"10E\": larger than 9223372036854775807, the largest quantity Kubernetes can represent"),
            ("8Ei1", "invalid quantity \"8Ei1\": unknown suffix \"Ei1\" (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"),
            ("1e2147483647", "invalid quantity \"1e2147483647\": larger than 9223372036854775807, the largest quantity Kubernetes can represent"),
            ("100000000000000000000000000000000000000000000000000m", "invalid quantity \"100000000000000000000000000000000000000000000000000m\": larger than 9223372036854775807, the largest quantity Kubernetes can represent"),
        ];
        for (text, want) in table {
            match Quantity::parse(text) {
                Ok(q) => panic!("{text:?} parsed as {q}"),
                Err(e) => assert_eq!(e.to_string(), *want, "{text:?}"),
            }
        }
    }

    #[test]
    fn exact_for_long_inputs() {
        // 60 significant digits that scale down to something small.
        let long = format!("0.{}1", "0".repeat(60));
        assert_eq!(nanos(&long), 1);
        let long = format!("{}e-50", "1".repeat(45));
        // 1.11..e-6 units with 45 ones: 1111.1... nano-units, rounded up.
        assert_eq!(nanos(&long), 1112);
        let huge = "9".repeat(5000);
        assert_eq!(
            Quantity::parse(&huge),
            Err(QuantityError::TooLarge { text: huge.clone() })
        );
    }

    #[test]
    fn display_and_from_nanos() {
        assert_eq!(Quantity::parse("1.5").expect("valid").to_string(), "1.5");
        assert_eq!(
            Quantity::parse("1n").expect("valid").to_string(),
            "0.000000001"
        );
        assert_eq!(Quantity::parse("1Ki").expect("valid").to_string(), "1024");
        assert_eq!(
            Quantity::from_nanos(MAX_NANOS).map(Quantity::value),
            Some(MAX_VALUE)
        );
        assert_eq!(Quantity::from_nanos(MAX_NANOS + 1), None);
        assert!("0".parse::<Quantity>().expect("valid").is_zero());
    }
}
