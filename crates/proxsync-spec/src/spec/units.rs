//! Size quantities: `8Gi`, `512M`, `4096`.
//!
//! `Ki Mi Gi Ti` are binary (powers of 1024), `K M G T` decimal (powers of 1000); the suffix is
//! case-insensitive (`8gi` is 8 GiB, `8g` is 8×10⁹ bytes). A number without a suffix is in the
//! field's own unit (MiB for memory, GiB for disk). Only whole numbers: `1.5Gi` is refused with
//! a hint to write `1536Mi`. Every multiplication is checked, so huge values give an error.

/// One KiB.
pub const KIB: u64 = 1024;
/// One MiB.
pub const MIB: u64 = 1024 * KIB;
/// One GiB.
pub const GIB: u64 = 1024 * MIB;
/// One TiB.
pub const TIB: u64 = 1024 * GIB;

/// The suffixes accepted, for messages.
pub(crate) const SUFFIX_HELP: &str = "Ki, Mi, Gi, Ti (binary) or K, M, G, T (decimal)";

/// Multiplier of a unit suffix, case-insensitive; `None` if the suffix is unknown.
fn suffix_factor(suffix: &str) -> Option<u64> {
    let f = match suffix.to_ascii_lowercase().as_str() {
        "ki" => KIB,
        "mi" => MIB,
        "gi" => GIB,
        "ti" => TIB,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        "t" => 1_000_000_000_000,
        _ => return None,
    };
    Some(f)
}

/// Parses a size written as a string into bytes. `plain_unit` is the size of one unit when no
/// suffix is given (e.g. [`MIB`] for memory) and `plain_name` its name for messages.
pub(crate) fn parse_size(text: &str, plain_unit: u64, plain_name: &str) -> Result<u64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let example = format!("e.g. 8Gi, 512Mi, 1Ti, or a plain number of {plain_name}");
    if digits.is_empty() {
        return Err(format!(
            "{text:?} is not a size: expected a whole number with an optional unit ({SUFFIX_HELP}), {example}"
        ));
    }
    if suffix.starts_with('.') || suffix.starts_with(',') {
        return Err(format!(
            "{text:?}: only whole numbers are accepted; use a smaller unit instead (e.g. 1536Mi rather than 1.5Gi)"
        ));
    }
    let factor = if suffix.is_empty() {
        plain_unit
    } else if let Some(f) = suffix_factor(suffix) {
        f
    } else {
        let hint = if suffix.trim_start() != suffix {
            " (no space between the number and the unit)".to_string()
        } else if suffix.len() > 1 && suffix.to_ascii_lowercase().ends_with('b') {
            format!(
                " (write {digits}{} without the B)",
                &suffix[..suffix.len() - 1]
            )
        } else {
            String::new()
        };
        return Err(format!(
            "{text:?}: unknown unit {suffix:?}{hint}; valid units are {SUFFIX_HELP}, {example}"
        ));
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large: the number does not fit in 64 bits"))?;
    n.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large: more than 16 EiB"))
}

/// Bytes from an integer written without a unit (YAML `memory: 4096`).
pub(crate) fn plain_number(n: i128, plain_unit: u64, plain_name: &str) -> Result<u64, String> {
    let n = u64::try_from(n).map_err(|_| {
        if n < 0 {
            format!(
                "{n} is negative: expected a positive size such as 8Gi or a number of {plain_name}"
            )
        } else {
            format!("{n} is too large: the number does not fit in 64 bits")
        }
    })?;
    n.checked_mul(plain_unit)
        .ok_or_else(|| format!("{n} {plain_name} is too large: more than 16 EiB"))
}

/// Human-readable size in the largest binary unit that divides it exactly (`128Mi`, `2Ti`).
pub(crate) fn format_bytes(bytes: u64) -> String {
    for (unit, name) in [(TIB, "Ti"), (GIB, "Gi"), (MIB, "Mi"), (KIB, "Ki")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(parse_size("8Gi", MIB, "MiB"), Ok(8 * GIB));
        assert_eq!(parse_size("8gi", MIB, "MiB"), Ok(8 * GIB));
        assert_eq!(parse_size("8GI", MIB, "MiB"), Ok(8 * GIB));
        assert_eq!(parse_size("8g", MIB, "MiB"), Ok(8_000_000_000));
        assert_eq!(parse_size("8G", MIB, "MiB"), Ok(8_000_000_000));
        assert_eq!(parse_size("512Mi", MIB, "MiB"), Ok(512 * MIB));
        assert_eq!(parse_size("512M", MIB, "MiB"), Ok(512_000_000));
        assert_eq!(parse_size("4Ki", MIB, "MiB"), Ok(4096));
        assert_eq!(parse_size("2k", MIB, "MiB"), Ok(2000));
        assert_eq!(parse_size("1Ti", GIB, "GiB"), Ok(TIB));
        assert_eq!(parse_size("1t", GIB, "GiB"), Ok(1_000_000_000_000));
    }

    #[test]
    fn plain_numbers_use_the_field_unit() {
        assert_eq!(parse_size("4096", MIB, "MiB"), Ok(4 * GIB));
        assert_eq!(parse_size("100", GIB, "GiB"), Ok(100 * GIB));
        assert_eq!(plain_number(4096, MIB, "MiB"), Ok(4 * GIB));
        assert_eq!(plain_number(100, GIB, "GiB"), Ok(100 * GIB));
    }

    #[test]
    fn refusals() {
        for bad in [
            "", "Gi", "-1Gi", "1.5Gi", "8 Gi", "8GiB", "8GB", "8Pi", "eight", "0x10", "8Gi ",
        ] {
            assert!(
                parse_size(bad, MIB, "MiB").is_err(),
                "{bad:?} should be refused"
            );
        }
        assert!(
            parse_size("1.5Gi", MIB, "MiB")
                .unwrap_err()
                .contains("1536Mi")
        );
        assert!(
            parse_size("8GiB", MIB, "MiB")
                .unwrap_err()
                .contains("8Gi without the B")
        );
        assert!(
            plain_number(-5, MIB, "MiB")
                .unwrap_err()
                .contains("negative")
        );
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert!(
            parse_size("99999999999999999999999Gi", MIB, "MiB")
                .unwrap_err()
                .contains("too large")
        );
        assert!(
            parse_size("18446744073709551615Ti", MIB, "MiB")
                .unwrap_err()
                .contains("too large")
        );
        assert!(
            parse_size("18446744073709551615", GIB, "GiB")
                .unwrap_err()
                .contains("too large")
        );
        assert!(plain_number(i128::MAX, GIB, "GiB").is_err());
        assert!(plain_number(u64::MAX as i128, GIB, "GiB").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(128 * MIB), "128Mi");
        assert_eq!(format_bytes(2 * TIB), "2Ti");
        assert_eq!(format_bytes(1536 * MIB), "1536Mi");
        assert_eq!(format_bytes(1000), "1000 bytes");
    }
}
