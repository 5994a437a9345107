//! Dotted version comparison, as the reference's `compareDottedVersions` with suffixes read.

use std::cmp::Ordering;

/// Compares `a` and `b` segment by segment as numbers, padding the shorter with zeros, so
/// `580.65.06 < 590.44.01`, `9.0 < 10.0` and `8.0 == 8`.
///
/// The reference counted a segment that is not a number as 0, which misreads `590.44.01-beta`;
/// here the leading digits of a segment are used instead, so `01-beta` reads as 1 rather than 0.
pub(crate) fn compare_dotted(a: &str, b: &str) -> Ordering {
    let left: Vec<u64> = a.trim().split('.').map(segment).collect();
    let right: Vec<u64> = b.trim().split('.').map(segment).collect();
    let len = left.len().max(right.len());
    for i in 0..len {
        let l = left.get(i).copied().unwrap_or(0);
        let r = right.get(i).copied().unwrap_or(0);
        match l.cmp(&r) {
            Ordering::Equal => continue,
            other => return other,
        }
    }
    Ordering::Equal
}

fn segment(text: &str) -> u64 {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_numerically_not_lexicographically() {
        assert_eq!(compare_dotted("580.65.06", "590.44.01"), Ordering::Less);
        assert_eq!(compare_dotted("9.0", "10.0"), Ordering::Less);
        assert_eq!(compare_dotted("8.0", "8"), Ordering::Equal);
        assert_eq!(compare_dotted("8.9", "8.0"), Ordering::Greater);
        assert_eq!(compare_dotted("580.0", "580.65.06"), Ordering::Less);
        assert_eq!(
            compare_dotted("590.44.01-beta", "590.44.01"),
            Ordering::Equal
        );
        assert_eq!(compare_dotted("x", "0"), Ordering::Equal);
    }
}
