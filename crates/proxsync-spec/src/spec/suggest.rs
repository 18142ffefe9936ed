//! "Did you mean": the closest of a set of names to a word typed wrong, by edit distance
//! (transpositions count as one edit), case and `-`/`_` ignored.

/// The candidate closest to `word`, when it is close enough to be what was meant: at most 2
/// edits, and fewer than half of the word's letters.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.replace(['-', '_'], "").to_lowercase();
    let w = norm(word);
    let limit = 2.min(w.chars().count().saturating_sub(1) / 2).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (strsim::osa_distance(&w, &norm(c)), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    const FIELDS: [&str; 9] = [
        "memory", "disk", "network", "cpu", "cpuType", "labels", "name", "node", "site",
    ];

    #[test]
    fn slips_of_the_keyboard_get_their_field() {
        for (typed, meant) in [
            ("memmory", "memory"),
            ("memroy", "memory"),
            ("dsik", "disk"),
            ("netwrk", "network"),
            ("cpus", "cpu"),
            ("lables", "labels"),
            ("Memory", "memory"),
            ("cpu_type", "cpuType"),
        ] {
            assert_eq!(closest(typed, FIELDS), Some(meant), "{typed}");
        }
    }

    #[test]
    fn a_different_word_gets_no_guess() {
        for typed in ["storage", "x", "ab", "hostname", "colour"] {
            assert_eq!(closest(typed, FIELDS), None, "{typed}");
        }
    }
}
