//! Text that people read: names of tenants, keys and users. Such text must not carry control
//! characters (a newline forges a log line) or invisible direction and width marks (a
//! right-to-left override (U+202E) before `nimda` makes `admin` + `nimda` read as something else in every list).

/// Unicode's bidirectional controls (embeddings, overrides, isolates and marks) and the
/// zero-width characters that change how text reads without showing.
fn is_invisible_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why `value` cannot be shown as a name, if it cannot.
pub fn unreadable(value: &str) -> Option<&'static str> {
    if value.chars().any(char::is_control) {
        Some("must not contain control characters (newlines, tabs, escapes)")
    } else if value.chars().any(is_invisible_control) {
        Some("must not contain invisible direction or zero-width characters")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass_and_tricks_are_named() {
        for fine in ["acme", "Ünïcode Ltd", "日本", "svc-1 (prod)"] {
            assert_eq!(unreadable(fine), None, "{fine}");
        }
        for control in ["a\nb", "a\tb", "a\u{1b}[31mb", "a\u{7f}"] {
            assert!(
                unreadable(control).unwrap().contains("control"),
                "{control:?}"
            );
        }
        for hidden in [
            "admin\u{202E}nimda",
            "a\u{200B}b",
            "a\u{2066}b",
            "\u{FEFF}a",
        ] {
            assert!(
                unreadable(hidden).unwrap().contains("invisible"),
                "{hidden:?}"
            );
        }
    }
}
