//! Request fingerprints computed the way the key table's application computes them: the request
//! body in a canonical form, hashed with SHA-256.
//!
//! Two canonical forms are in use. The storage design hashes "canonical JSON with stable member
//! ordering", for which RFC 8785 (JSON Canonicalization Scheme) is the standard, and stores the
//! raw digest in a bytea column. The explainer's Python handler hashes `json.dumps(body,
//! sort_keys=True)` and stores the hex digest as text. Both are reproduced here byte for byte,
//! numbers included, from a parser that keeps every number's literal and nests to any depth.
//!
//! The parser is this module's own because no maintained JSON crate keeps all of what the two
//! forms need. `serde_json` rejects a lone surrogate escape (`"\ud800"`), which JSON text allows
//! and Python's `json.loads` accepts and writes back as `\ud800`; it refuses nesting deeper than
//! 128 levels unless built with `unbounded_depth`, which then recurses on the thread's stack; and
//! its `Value` keeps a number as an `f64`, `u64` or `i64` (or, with `arbitrary_precision`, as text
//! only for that whole build), where Python writes a large integer exactly and a float as its own
//! repr. Strings are therefore kept as UTF-16 code units and numbers as their literals, in one
//! arena that neither recursion nor a deep body can overflow.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

/// How the body is turned into the bytes that are hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Canonical {
    /// RFC 8785 JSON Canonicalization Scheme: sorted members (by UTF-16 code units), no
    /// whitespace, numbers as ECMAScript prints them, strings in UTF-8.
    Jcs,
    /// Python's `json.dumps(body, sort_keys=True)`: `", "` and `": "` separators, non-ASCII
    /// escaped as \uXXXX, integers exact and floats as Python's repr.
    SortedKeys,
    /// The body's bytes as given, not parsed.
    Raw,
}

impl Canonical {
    /// The name used by `--canonical`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Canonical::Jcs => "jcs",
            Canonical::SortedKeys => "sorted-keys",
            Canonical::Raw => "raw",
        }
    }

    /// The form the application most likely used, from the type of the stored fingerprint column:
    /// a raw digest (bytea) goes with the storage design's JCS, a hex text digest with the
    /// explainer's `json.dumps(sort_keys=True)`. The one place this choice is made.
    pub(crate) fn default_for_column(sql_type: &str) -> Canonical {
        if sql_type == "bytea" {
            Canonical::Jcs
        } else {
            Canonical::SortedKeys
        }
    }
}

/// The SHA-256 digest of the body's canonical form; the error is one line saying why the body
/// has no such form.
pub(crate) fn fingerprint(body: &[u8], how: Canonical) -> Result<Vec<u8>, String> {
    let bytes = canonical_bytes(body, how)?;
    Ok(Sha256::digest(&bytes).to_vec())
}

/// The bytes that are hashed.
pub(crate) fn canonical_bytes(body: &[u8], how: Canonical) -> Result<Vec<u8>, String> {
    if how == Canonical::Raw {
        return Ok(body.to_vec());
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        format!(
            "the body is not UTF-8 text (invalid byte at offset {}), so it is not JSON; use --canonical raw to hash its bytes as they are",
            e.valid_up_to()
        )
    })?;
    let tree = Tree::parse(text).map_err(|e| {
        format!("the body is not JSON ({e}); use --canonical raw to hash its bytes as they are")
    })?;
    match how {
        Canonical::Jcs => tree.write(&Jcs),
        Canonical::SortedKeys => tree.write(&SortedKeys),
        Canonical::Raw => unreachable!("handled above"),
    }
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON value tree kept in one arena, so that neither parsing, writing nor dropping a deeply
/// nested body recurses.
struct Tree {
    nodes: Vec<Node>,
    root: usize,
}

/// Strings are kept as UTF-16 code units: JCS sorts by them, Python escapes them one by one, and a
/// lone surrogate (legal in JSON text) survives.
type Units = Vec<u16>;

enum Node {
    Null,
    Bool(bool),
    /// The literal as written, and whether it is an integer (no fraction, no exponent).
    Num(String, bool),
    Str(Units),
    Arr(Vec<usize>),
    /// Members in the order written, duplicates already resolved (the last one wins, as in both
    /// JavaScript's JSON.parse and Python's json.loads).
    Obj(Vec<(Units, usize)>),
}

enum Frame {
    Arr(Vec<usize>),
    Obj(Vec<(Units, usize)>, Units),
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.at)
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", byte as char)))
        }
    }

    fn literal(&mut self, word: &str, node: Node) -> Result<Node, String> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(node)
        } else {
            Err(self.err("unexpected character"))
        }
    }

    fn number(&mut self) -> Result<Node, String> {
        let start = self.at;
        let b = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while b.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let mut at = self.at;
        if b.get(at) == Some(&b'-') {
            at += 1;
        }
        let int_start = at;
        let n = digits(&mut at);
        if n == 0 || (n > 1 && b[int_start] == b'0') {
            return Err(self.err("malformed number"));
        }
        let mut integer = true;
        if b.get(at) == Some(&b'.') {
            at += 1;
            integer = false;
            if digits(&mut at) == 0 {
                return Err(self.err("malformed number"));
            }
        }
        if matches!(b.get(at), Some(b'e' | b'E')) {
            at += 1;
            integer = false;
            if matches!(b.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(self.err("malformed number"));
            }
        }
        self.at = at;
        Ok(Node::Num(self.text[start..at].to_owned(), integer))
    }

    fn hex4(&mut self) -> Result<u16, String> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .filter(|d| d.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| self.err("malformed \\u escape"))?;
        self.at += 4;
        u16::from_str_radix(digits, 16).map_err(|_| self.err("malformed \\u escape"))
    }

    fn string(&mut self) -> Result<Units, String> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string"));
        }
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(c) = self.text[self.at..].chars().next() else {
                return Err(self.err("unterminated string"));
            };
            self.at += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let e = self.peek().ok_or_else(|| self.err("unterminated string"))?;
                    self.at += 1;
                    let unit = match e {
                        b'"' => 0x22,
                        b'\\' => 0x5c,
                        b'/' => 0x2f,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => 0x0a,
                        b'r' => 0x0d,
                        b't' => 0x09,
                        b'u' => self.hex4()?,
                        _ => return Err(self.err("invalid escape")),
                    };
                    out.push(unit);
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.err("control character inside a string"));
                }
                c => {
                    let mut buf = [0u16; 2];
                    out.extend_from_slice(c.encode_utf16(&mut buf));
                }
            }
        }
    }
}

impl Tree {
    fn parse(text: &str) -> Result<Tree, String> {
        let mut p = Parser { text, at: 0 };
        let mut nodes: Vec<Node> = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            p.skip_ws();
            let node = match p.peek() {
                Some(b'{') => {
                    p.at += 1;
                    p.skip_ws();
                    if p.peek() == Some(b'}') {
                        p.at += 1;
                        Node::Obj(Vec::new())
                    } else {
                        let key = p.string()?;
                        p.expect(b':')?;
                        stack.push(Frame::Obj(Vec::new(), key));
                        continue;
                    }
                }
                Some(b'[') => {
                    p.at += 1;
                    p.skip_ws();
                    if p.peek() == Some(b']') {
                        p.at += 1;
                        Node::Arr(Vec::new())
                    } else {
                        stack.push(Frame::Arr(Vec::new()));
                        continue;
                    }
                }
                Some(b'"') => Node::Str(p.string()?),
                Some(b't') => p.literal("true", Node::Bool(true))?,
                Some(b'f') => p.literal("false", Node::Bool(false))?,
                Some(b'n') => p.literal("null", Node::Null)?,
                Some(b'-' | b'0'..=b'9') => p.number()?,
                Some(_) => return Err(p.err("unexpected character")),
                None => return Err(p.err("unexpected end of input")),
            };
            nodes.push(node);
            let mut id = nodes.len() - 1;
            // Attach the value to its container, closing every container that ends here.
            loop {
                p.skip_ws();
                let closed = match stack.last_mut() {
                    None => {
                        if p.at != text.len() {
                            return Err(p.err("unexpected text after the value"));
                        }
                        return Ok(Tree { nodes, root: id });
                    }
                    Some(Frame::Arr(items)) => {
                        items.push(id);
                        match p.peek() {
                            Some(b',') => {
                                p.at += 1;
                                None
                            }
                            Some(b']') => {
                                p.at += 1;
                                Some(Node::Arr(std::mem::take(items)))
                            }
                            _ => return Err(p.err("expected ',' or ']'")),
                        }
                    }
                    Some(Frame::Obj(members, key)) => {
                        members.push((std::mem::take(key), id));
                        match p.peek() {
                            Some(b',') => {
                                p.at += 1;
                                *key = p.string()?;
                                p.expect(b':')?;
                                None
                            }
                            Some(b'}') => {
                                p.at += 1;
                                Some(Node::Obj(last_wins(std::mem::take(members))))
                            }
                            _ => return Err(p.err("expected ',' or '}'")),
                        }
                    }
                };
                match closed {
                    // A ',' was read: parse the next value.
                    None => break,
                    Some(node) => {
                        stack.pop();
                        nodes.push(node);
                        id = nodes.len() - 1;
                    }
                }
            }
        }
    }

    /// Write the canonical form without recursing.
    fn write(&self, style: &dyn Style) -> Result<Vec<u8>, String> {
        enum Work<'a> {
            Node(usize),
            Lit(&'static str),
            Key(&'a Units),
        }
        let mut out = Vec::new();
        let mut todo = vec![Work::Node(self.root)];
        while let Some(work) = todo.pop() {
            match work {
                Work::Lit(s) => out.extend_from_slice(s.as_bytes()),
                Work::Key(k) => style.string(k, &mut out)?,
                Work::Node(id) => match &self.nodes[id] {
                    Node::Null => out.extend_from_slice(b"null"),
                    Node::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
                    Node::Num(lit, integer) => {
                        out.extend_from_slice(style.number(lit, *integer)?.as_bytes())
                    }
                    Node::Str(s) => style.string(s, &mut out)?,
                    Node::Arr(items) => {
                        out.push(b'[');
                        todo.push(Work::Lit("]"));
                        for (n, item) in items.iter().enumerate().rev() {
                            todo.push(Work::Node(*item));
                            if n > 0 {
                                todo.push(Work::Lit(style.comma()));
                            }
                        }
                    }
                    Node::Obj(members) => {
                        out.push(b'{');
                        todo.push(Work::Lit("}"));
                        let mut sorted: Vec<&(Units, usize)> = members.iter().collect();
                        style.sort(&mut sorted);
                        for (n, (key, value)) in sorted.iter().enumerate().rev() {
                            todo.push(Work::Node(*value));
                            todo.push(Work::Lit(style.colon()));
                            todo.push(Work::Key(key));
                            if n > 0 {
                                todo.push(Work::Lit(style.comma()));
                            }
                        }
                    }
                },
            }
        }
        Ok(out)
    }
}

/// Resolve duplicate member names: the last value wins, at the first name's position.
fn last_wins(members: Vec<(Units, usize)>) -> Vec<(Units, usize)> {
    let mut at: HashMap<Units, usize> = HashMap::with_capacity(members.len());
    let mut out: Vec<(Units, usize)> = Vec::with_capacity(members.len());
    for (key, value) in members {
        match at.get(&key) {
            Some(&i) => out[i].1 = value,
            None => {
                at.insert(key.clone(), out.len());
                out.push((key, value));
            }
        }
    }
    out
}

/// What differs between the canonical forms.
trait Style {
    fn comma(&self) -> &'static str;
    fn colon(&self) -> &'static str;
    fn sort(&self, members: &mut Vec<&(Units, usize)>);
    fn number(&self, literal: &str, integer: bool) -> Result<String, String>;
    fn string(&self, units: &[u16], out: &mut Vec<u8>) -> Result<(), String>;
}

struct Jcs;

impl Style for Jcs {
    fn comma(&self) -> &'static str {
        ","
    }

    fn colon(&self) -> &'static str {
        ":"
    }

    fn sort(&self, members: &mut Vec<&(Units, usize)>) {
        members.sort_by(|a, b| a.0.cmp(&b.0));
    }

    fn number(&self, literal: &str, _integer: bool) -> Result<String, String> {
        let x: f64 = literal
            .parse()
            .map_err(|_| format!("number {literal} cannot be read"))?;
        if !x.is_finite() {
            return Err(format!(
                "number {} is beyond the IEEE 754 double range JCS allows; use --canonical raw or sorted-keys",
                abbreviate(literal)
            ));
        }
        Ok(ecmascript_number(x))
    }

    fn string(&self, units: &[u16], out: &mut Vec<u8>) -> Result<(), String> {
        out.push(b'"');
        for c in char::decode_utf16(units.iter().copied()) {
            let c = c.map_err(|e| {
                format!(
                    "a string holds a lone surrogate (\\u{:04x}), which JCS does not allow",
                    e.unpaired_surrogate()
                )
            })?;
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                '\r' => out.extend_from_slice(b"\\r"),
                c if (c as u32) < 0x20 => {
                    out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
                }
                c => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        out.push(b'"');
        Ok(())
    }
}

struct SortedKeys;

impl Style for SortedKeys {
    fn comma(&self) -> &'static str {
        ", "
    }

    fn colon(&self) -> &'static str {
        ": "
    }

    /// Python compares str by code point: a surrogate pair counts as the one code point it
    /// encodes, which orders differently from UTF-16 units above U+E000.
    fn sort(&self, members: &mut Vec<&(Units, usize)>) {
        let points = |u: &Units| -> Vec<u32> {
            char::decode_utf16(u.iter().copied())
                .map(|r| r.map_or_else(|e| u32::from(e.unpaired_surrogate()), u32::from))
                .collect()
        };
        members.sort_by_cached_key(|m| points(&m.0));
    }

    fn number(&self, literal: &str, integer: bool) -> Result<String, String> {
        if integer {
            // Python ints are exact; only -0 changes (to 0).
            if literal.trim_start_matches('-').bytes().all(|b| b == b'0') {
                return Ok("0".to_owned());
            }
            return Ok(literal.to_owned());
        }
        let x: f64 = literal
            .parse()
            .map_err(|_| format!("number {literal} cannot be read"))?;
        Ok(python_float_repr(x))
    }

    fn string(&self, units: &[u16], out: &mut Vec<u8>) -> Result<(), String> {
        out.push(b'"');
        for &u in units {
            match u {
                0x22 => out.extend_from_slice(b"\\\""),
                0x5c => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                0x0a => out.extend_from_slice(b"\\n"),
                0x0d => out.extend_from_slice(b"\\r"),
                0x09 => out.extend_from_slice(b"\\t"),
                // Printable ASCII: 0x20..=0x7e, and so a byte.
                0x20..=0x7e => out.push(u as u8),
                u => out.extend_from_slice(format!("\\u{u:04x}").as_bytes()),
            }
        }
        out.push(b'"');
        Ok(())
    }
}

fn abbreviate(s: &str) -> String {
    if s.len() > 40 {
        format!("{}...", &s[..37])
    } else {
        s.to_owned()
    }
}

/// The shortest decimal digits that read back as `x` (x finite, non-zero), and the position of
/// the decimal point: x = 0.DIGITS * 10^point.
fn shortest_digits(x: f64) -> (String, i32) {
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    (digits, exp + 1)
}

/// ECMAScript's Number::toString(x), which RFC 8785 uses for every number.
pub(crate) fn ecmascript_number(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let (d, n) = shortest_digits(x);
    let k = d.len() as i32;
    let body = if k <= n && n <= 21 {
        format!("{d}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &d[..n as usize], &d[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{d}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let exp = if e >= 0 {
            format!("e+{e}")
        } else {
            format!("e-{}", -e)
        };
        if k == 1 {
            format!("{d}{exp}")
        } else {
            format!("{}.{}{exp}", &d[..1], &d[1..])
        }
    };
    format!("{sign}{body}")
}

/// Python's repr(float), as json.dumps prints a float.
pub(crate) fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0.0");
    }
    let (d, point) = shortest_digits(x);
    let k = d.len() as i32;
    let body = if point <= -4 || point > 16 {
        let e = point - 1;
        let mantissa = if k == 1 {
            d.clone()
        } else {
            format!("{}.{}", &d[..1], &d[1..])
        };
        let esign = if e < 0 { '-' } else { '+' };
        format!("{mantissa}e{esign}{:02}", e.abs())
    } else if point <= 0 {
        format!("0.{}{d}", "0".repeat((-point) as usize))
    } else if point >= k {
        format!("{d}{}.0", "0".repeat((point - k) as usize))
    } else {
        format!("{}.{}", &d[..point as usize], &d[point as usize..])
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(body: &str, how: Canonical) -> String {
        String::from_utf8(canonical_bytes(body.as_bytes(), how).unwrap()).unwrap()
    }

    #[test]
    fn ecmascript_numbers_follow_the_specification() {
        for (x, s) in [
            (1.0, "1"),
            (-0.0, "0"),
            (0.5, "0.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (4.5, "4.5"),
            (2e-3, "0.002"),
            (333_333_333.333_333_3, "333333333.3333333"),
            (1e23, "1e+23"),
            (9007199254740993.0, "9007199254740992"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            assert_eq!(ecmascript_number(x), s, "{x:e}");
        }
    }

    #[test]
    fn python_reprs_follow_cpython() {
        for (x, s) in [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (12345678901234567890.123456789, "1.2345678901234567e+19"),
            (1e100, "1e+100"),
            (123.456, "123.456"),
            (f64::INFINITY, "Infinity"),
        ] {
            assert_eq!(python_float_repr(x), s, "{x:e}");
        }
    }

    #[test]
    fn jcs_sorts_by_utf16_and_escapes_only_what_it_must() {
        assert_eq!(
            canon(
                r#"{"b": [1, 2.50, {"z": null, "a": true}], "a": "\u00e9\n\u001f/"}"#,
                Canonical::Jcs
            ),
            "{\"a\":\"é\\n\\u001f/\",\"b\":[1,2.5,{\"a\":true,\"z\":null}]}"
        );
        // U+1F600 (a surrogate pair starting 0xD83D) sorts before U+FB01 in UTF-16 order.
        assert_eq!(
            canon("{\"\u{fb01}\":1,\"\u{1f600}\":2}", Canonical::Jcs),
            "{\"\u{1f600}\":2,\"\u{fb01}\":1}"
        );
        assert!(canonical_bytes(b"[1e400]", Canonical::Jcs).is_err());
        assert!(canonical_bytes(br#"["\ud800"]"#, Canonical::Jcs).is_err());
    }

    #[test]
    fn sorted_keys_matches_json_dumps() {
        assert_eq!(
            canon(
                r#"{"b": [1, 2.50, -0, 18446744073709551617, 1e400], "a": "é😀\"\\"}"#,
                Canonical::SortedKeys
            ),
            r#"{"a": "\u00e9\ud83d\ude00\"\\", "b": [1, 2.5, 0, 18446744073709551617, Infinity]}"#
        );
        // Code point order: U+FB01 before U+1F600.
        assert_eq!(
            canon("{\"\u{1f600}\":2,\"\u{fb01}\":1}", Canonical::SortedKeys),
            r#"{"\ufb01": 1, "\ud83d\ude00": 2}"#
        );
        assert_eq!(
            canon(r#"{"a":1,"a":2}"#, Canonical::SortedKeys),
            r#"{"a": 2}"#
        );
    }

    #[test]
    fn deep_nesting_neither_recurses_nor_fails() {
        let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(canon(&body, Canonical::Jcs), body);
    }

    #[test]
    fn malformed_bodies_are_refused_with_a_reason() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "nul",
            "[1] x",
            "\"\u{1}\"",
        ] {
            let e = canonical_bytes(bad.as_bytes(), Canonical::Jcs).unwrap_err();
            assert!(e.contains("not JSON"), "{bad}: {e}");
        }
        assert_eq!(
            canonical_bytes(b"not json", Canonical::Raw).unwrap(),
            b"not json"
        );
    }
}
