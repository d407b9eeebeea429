//! JSON text shown exactly as stored: re-indented token by token, never parsed into numbers, so
//! `18446744073709551617`, `1e400` and a body nested thousands deep come out as they went in.

/// Members whose value is JSON text to splice in verbatim are first serialised as this string
/// followed by their index. It holds a NUL, which no text PostgreSQL returns can contain, so it
/// cannot collide with data.
const RAW_MARK: &str = "\u{0}idemctl-raw-json\u{0}";

/// A placeholder for raw JSON text number `n`, to put in a `serde_json::Value`.
pub(crate) fn raw_placeholder(n: usize) -> serde_json::Value {
    serde_json::Value::String(format!("{RAW_MARK}{n}"))
}

/// Serialise `value` as indented JSON, replacing each [`raw_placeholder`]`(n)` with `raws[n]`
/// (valid JSON text, such as a jsonb column read as text), or with `null` for `None`.
pub(crate) fn document(value: &serde_json::Value, raws: &[Option<&str>]) -> String {
    let mut compact = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    for (n, raw) in raws.iter().enumerate() {
        let mark = serde_json::to_string(&format!("{RAW_MARK}{n}")).unwrap_or_default();
        compact = compact.replace(&mark, raw.unwrap_or("null"));
    }
    let mut out = pretty(&compact, Escape::None);
    out.push('\n');
    out
}

/// How string contents are treated on the way out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escape {
    /// As stored (for `-o json`).
    None,
    /// Characters that could drive a terminal (C1 controls, DEL, bidirectional overrides) become
    /// JSON `\uXXXX` escapes: the text still reads as the same JSON, and nothing is escaped twice.
    Terminal,
}

/// Indent valid JSON text two spaces per level, `"key": value`, empty containers as `{}`/`[]`.
pub(crate) fn pretty(text: &str, escape: Escape) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            out.push('\\');
                            if let Some(e) = chars.next() {
                                out.push(e);
                            }
                        }
                        '"' => break,
                        c if escape == Escape::Terminal && needs_terminal_escape(c) => {
                            let mut buf = [0u16; 2];
                            for unit in c.encode_utf16(&mut buf) {
                                out.push_str(&format!("\\u{unit:04x}"));
                            }
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                out.push(c);
                if chars.peek() == Some(&close) {
                    chars.next();
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c if escape == Escape::Terminal && (c.is_control() || needs_terminal_escape(c)) => {
                out.push_str(&super::sanitize(&c.to_string()));
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters JSON leaves unescaped inside strings that a terminal would act on.
fn needs_terminal_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_escapes_pass_through_exactly() {
        let stored = r#"{"a": 18446744073709551617, "b": 12345678901234567890.123456789, "c": "say \"hi\"", "d": "C:\\temp", "e": [], "f": {}, "g": [1, {"h": 1e400}]}"#;
        assert_eq!(
            pretty(stored, Escape::Terminal),
            "{\n  \"a\": 18446744073709551617,\n  \"b\": 12345678901234567890.123456789,\n  \"c\": \"say \\\"hi\\\"\",\n  \"d\": \"C:\\\\temp\",\n  \"e\": [],\n  \"f\": {},\n  \"g\": [\n    1,\n    {\n      \"h\": 1e400\n    }\n  ]\n}"
        );
    }

    #[test]
    fn terminal_controls_become_json_escapes() {
        assert_eq!(
            pretty("[\"a\u{9b}b\u{202e}c\u{7f}\"]", Escape::Terminal),
            "[\n  \"a\\u009bb\\u202ec\\u007f\"\n]"
        );
        assert_eq!(
            pretty("[\"\u{202e}\"]", Escape::None),
            "[\n  \"\u{202e}\"\n]"
        );
    }

    #[test]
    fn documents_splice_raw_members() {
        let v =
            serde_json::json!({"k": "x", "body": raw_placeholder(0), "other": raw_placeholder(1)});
        assert_eq!(
            document(&v, &[Some("[1e400]"), None]),
            "{\n  \"body\": [\n    1e400\n  ],\n  \"k\": \"x\",\n  \"other\": null\n}\n"
        );
    }
}
