//! Escaping untrusted strings (keys, paths, bodies, table names) before they reach a terminal, so
//! that a key cannot move the cursor, clear the screen or forge output lines.

/// Replace control characters and bidirectional overrides with visible escapes (`\n`, `\x1b`,
/// `\u{202e}`); a backslash becomes `\\` so the escaping is unambiguous.
pub(crate) fn sanitize(s: &str) -> String {
    escape(s, true)
}

/// [`sanitize`] that leaves backslashes as they are: for a line that may hold text escaped once
/// already (an error chain with a sanitised key), where it changes nothing but what is unescaped.
pub(crate) fn escape_controls(s: &str) -> String {
    escape(s, false)
}

/// [`escape_controls`] for a value that is several lines (a statement, a plan, a body): each line
/// escaped, the line breaks kept, so it prints as lines and never as a literal `\n`.
pub(crate) fn escape_lines(s: &str) -> String {
    s.lines()
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

fn escape(s: &str, backslash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' if backslash => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if crate::domain::moves_the_terminal(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls() {
        assert_eq!(sanitize("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(sanitize("x\ny"), "x\\ny");
        assert_eq!(sanitize("a\\b"), "a\\\\b");
        assert_eq!(sanitize("\u{202e}evil"), "\\u{202e}evil");
        assert_eq!(sanitize("plain-key_123"), "plain-key_123");
    }

    #[test]
    fn multi_line_values_keep_their_lines() {
        assert_eq!(
            escape_lines("DELETE\n  FROM t\r\nWHERE a\x1b"),
            "DELETE\n  FROM t\nWHERE a\\x1b"
        );
        assert_eq!(escape_lines("one line"), "one line");
        assert_eq!(escape_lines("a\tb\n"), "a\\tb");
    }

    #[test]
    fn escaping_controls_again_changes_nothing() {
        for raw in ["a\x1b[2Jb", "x\ny\\z", "\u{202e}evil", "t\u{7}"] {
            let once = sanitize(raw);
            assert_eq!(escape_controls(&once), once);
            assert_eq!(escape_controls(raw), once.replace("\\\\", "\\"));
        }
    }
}
