//! The in-flight predicate a config file's mapping may give, in a small grammar that can only
//! compare columns with literals: `column IS [NOT] NULL|TRUE|FALSE`, `column <op> literal`,
//! `column [NOT] IN (literal, ...)`, combined with AND, OR, NOT and parentheses. It is parsed into a
//! tree and rendered back with every column quoted as an identifier and every string escaped as a
//! literal, so no text from the file reaches a statement as written.

/// A literal a column is compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Literal {
    Text(String),
    /// Digits with an optional sign and decimal point, checked when parsed.
    Number(String),
    Bool(bool),
}

/// A parsed predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pred {
    Or(Vec<Pred>),
    And(Vec<Pred>),
    Not(Box<Pred>),
    /// `column IS [NOT] NULL` (`what` None), `IS [NOT] TRUE/FALSE` (`what` Some).
    Is {
        column: String,
        negated: bool,
        what: Option<bool>,
    },
    Compare {
        column: String,
        op: &'static str,
        value: Literal,
    },
    In {
        column: String,
        negated: bool,
        values: Vec<Literal>,
    },
}

/// Why a predicate was refused: what was found where, and what the grammar accepts (worded by
/// the output layer).
pub(crate) use crate::report::db::ParseError;
use crate::report::db::Seen;

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Text(String),
    Number(String),
    Op(&'static str),
    Open,
    Close,
    Comma,
}

/// The string (`'...'`) or quoted name (`"..."`) that opens at `chars[start]`, a doubled quote
/// standing for one, and where the input goes on after it.
fn quoted(chars: &[char], start: usize) -> Result<(Token, usize), ParseError> {
    let c = chars[start];
    let mut text = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(ParseError::Unterminated(c));
            }
            Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                text.push(c);
                i += 2;
            }
            Some(&q) if q == c => {
                i += 1;
                break;
            }
            Some(&ch) => {
                text.push(ch);
                i += 1;
            }
        }
    }
    if c == '"' {
        if text.is_empty() {
            return Err(ParseError::EmptyQuotedName);
        }
        return Ok((Token::Quoted(text), i));
    }
    Ok((Token::Text(text), i))
}

/// The number that starts at `chars[start]` (a sign, digits and at most one point), and where the
/// input goes on after it.
fn number(chars: &[char], start: usize) -> Result<(Token, usize), ParseError> {
    let mut i = start + 1;
    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
        i += 1;
    }
    let n: String = chars[start..i].iter().collect();
    let digits = n.trim_start_matches(['-', '+']);
    let valid = !digits.is_empty()
        && digits.chars().filter(|&d| d == '.').count() <= 1
        && digits.chars().any(|d| d.is_ascii_digit());
    if !valid {
        return Err(ParseError::NotANumber(n));
    }
    Ok((Token::Number(n), i))
}

fn tokens(input: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            ',' => {
                out.push(Token::Comma);
                i += 1;
            }
            '\'' | '"' => {
                let (token, next) = quoted(&chars, i)?;
                out.push(token);
                i = next;
            }
            '=' => {
                out.push(Token::Op("="));
                i += 1;
            }
            '<' | '>' | '!' => {
                let next = chars.get(i + 1).copied();
                let op = match (c, next) {
                    ('<', Some('>')) | ('!', Some('=')) => "<>",
                    ('<', Some('=')) => "<=",
                    ('>', Some('=')) => ">=",
                    ('<', _) => "<",
                    ('>', _) => ">",
                    _ => return Err(ParseError::LoneBang),
                };
                i += if matches!(op, "<" | ">") { 1 } else { 2 };
                out.push(Token::Op(op));
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let (token, next) = number(&chars, i)?;
                out.push(token);
                i = next;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
                {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
            other => {
                return Err(ParseError::Unexpected(other));
            }
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

fn is_kw(t: Option<&Token>, kw: &str) -> bool {
    matches!(t, Some(Token::Word(w)) if w.eq_ignore_ascii_case(kw))
}

const KEYWORDS: &[&str] = &["and", "or", "not", "is", "in", "null", "true", "false"];

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if is_kw(self.peek(), kw) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Pred, ParseError> {
        let mut parts = vec![self.and()?];
        while self.eat_kw("or") {
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Pred::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Pred, ParseError> {
        let mut parts = vec![self.unary()?];
        while self.eat_kw("and") {
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Pred::And(parts)
        })
    }

    fn unary(&mut self) -> Result<Pred, ParseError> {
        if self.eat_kw("not") {
            return Ok(Pred::Not(Box::new(self.unary()?)));
        }
        if self.peek() == Some(&Token::Open) {
            self.at += 1;
            let inner = self.or()?;
            if self.next() != Some(Token::Close) {
                return Err(ParseError::Unclosed);
            }
            return Ok(inner);
        }
        self.comparison()
    }

    fn column(&mut self) -> Result<String, ParseError> {
        match self.next() {
            Some(Token::Quoted(name)) => Ok(name),
            Some(Token::Word(w)) if !KEYWORDS.contains(&w.to_ascii_lowercase().as_str()) => {
                // An unquoted name folds to lower case, as PostgreSQL folds it.
                Ok(w.to_lowercase())
            }
            other => Err(ParseError::ExpectedColumn(seen(other.as_ref()))),
        }
    }

    fn literal(&mut self) -> Result<Literal, ParseError> {
        match self.next() {
            Some(Token::Text(t)) => Ok(Literal::Text(t)),
            Some(Token::Number(n)) => Ok(Literal::Number(n)),
            Some(Token::Word(w)) if w.eq_ignore_ascii_case("true") => Ok(Literal::Bool(true)),
            Some(Token::Word(w)) if w.eq_ignore_ascii_case("false") => Ok(Literal::Bool(false)),
            other => Err(ParseError::ExpectedLiteral(seen(other.as_ref()))),
        }
    }

    fn comparison(&mut self) -> Result<Pred, ParseError> {
        let column = self.column()?;
        if self.eat_kw("is") {
            let negated = self.eat_kw("not");
            let what = if self.eat_kw("null") {
                None
            } else if self.eat_kw("true") {
                Some(true)
            } else if self.eat_kw("false") {
                Some(false)
            } else {
                return Err(ParseError::ExpectedIsOperand(seen(self.peek())));
            };
            return Ok(Pred::Is {
                column,
                negated,
                what,
            });
        }
        let negated = self.eat_kw("not");
        if self.eat_kw("in") {
            if self.next() != Some(Token::Open) {
                return Err(ParseError::ExpectedOpenAfterIn);
            }
            let mut values = vec![self.literal()?];
            loop {
                match self.next() {
                    Some(Token::Comma) => values.push(self.literal()?),
                    Some(Token::Close) => break,
                    other => {
                        return Err(ParseError::ExpectedInListSeparator(seen(other.as_ref())));
                    }
                }
            }
            return Ok(Pred::In {
                column,
                negated,
                values,
            });
        }
        if negated {
            return Err(ParseError::ExpectedInAfterNot);
        }
        match self.next() {
            Some(Token::Op(op)) => Ok(Pred::Compare {
                column,
                op,
                value: self.literal()?,
            }),
            other => Err(ParseError::ExpectedComparison {
                column,
                found: seen(other.as_ref()),
            }),
        }
    }
}

/// What a parse error found at a place: a token, or the end.
fn seen(t: Option<&Token>) -> Seen {
    match t {
        None => Seen::End,
        Some(Token::Word(w)) => Seen::Word(w.clone()),
        Some(Token::Quoted(w)) => Seen::Quoted(w.clone()),
        Some(Token::Text(w)) => Seen::Text(w.clone()),
        Some(Token::Number(n)) => Seen::Number(n.clone()),
        Some(Token::Op(o)) => Seen::Op(o),
        Some(Token::Open) => Seen::Open,
        Some(Token::Close) => Seen::Close,
        Some(Token::Comma) => Seen::Comma,
    }
}

impl Pred {
    /// Parse a predicate; anything outside the grammar is refused.
    pub(crate) fn parse(input: &str) -> Result<Pred, ParseError> {
        let tokens = tokens(input)?;
        if tokens.is_empty() {
            return Err(ParseError::Empty);
        }
        let mut p = Parser { tokens, at: 0 };
        let pred = p.or()?;
        if p.at < p.tokens.len() {
            return Err(ParseError::Trailing(seen(p.peek())));
        }
        Ok(pred)
    }

    /// The columns the predicate reads, in order of appearance, once each.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_columns(&mut out);
        out
    }

    fn collect_columns(&self, out: &mut Vec<String>) {
        match self {
            Pred::Or(parts) | Pred::And(parts) => {
                parts.iter().for_each(|p| p.collect_columns(out));
            }
            Pred::Not(p) => p.collect_columns(out),
            Pred::Is { column, .. } | Pred::Compare { column, .. } | Pred::In { column, .. } => {
                if !out.contains(column) {
                    out.push(column.clone());
                }
            }
        }
    }

    /// The predicate as SQL, parenthesised, each column written by `column` (which quotes it and
    /// may qualify it with an alias).
    pub fn render(&self, column: &dyn Fn(&str) -> String) -> String {
        match self {
            Pred::Or(parts) => join(parts, " OR ", column),
            Pred::And(parts) => join(parts, " AND ", column),
            Pred::Not(p) => format!("(NOT {})", p.render(column)),
            Pred::Is {
                column: c,
                negated,
                what,
            } => format!(
                "({} IS {}{})",
                column(c),
                if *negated { "NOT " } else { "" },
                match what {
                    None => "NULL",
                    Some(true) => "TRUE",
                    Some(false) => "FALSE",
                }
            ),
            Pred::Compare {
                column: c,
                op,
                value,
            } => format!("({} {op} {})", column(c), value.sql()),
            Pred::In {
                column: c,
                negated,
                values,
            } => format!(
                "({} {}IN ({}))",
                column(c),
                if *negated { "NOT " } else { "" },
                values
                    .iter()
                    .map(Literal::sql)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn join(parts: &[Pred], sep: &str, column: &dyn Fn(&str) -> String) -> String {
    format!(
        "({})",
        parts
            .iter()
            .map(|p| p.render(column))
            .collect::<Vec<_>>()
            .join(sep)
    )
}

impl Literal {
    fn sql(&self) -> String {
        match self {
            Literal::Text(t) => crate::ident::literal(t),
            Literal::Number(n) => n.clone(),
            Literal::Bool(true) => "TRUE".into(),
            Literal::Bool(false) => "FALSE".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(c: &str) -> String {
        format!("t.\"{}\"", c.replace('"', "\"\""))
    }

    #[test]
    fn renders_columns_quoted_and_literals_escaped() {
        let p = Pred::parse("Finished_At IS NULL and (\"Claim\" <> 'it''s' OR code in (202, -1))")
            .unwrap();
        assert_eq!(
            p.render(&q),
            "((t.\"finished_at\" IS NULL) AND ((t.\"Claim\" <> 'it''s') OR (t.\"code\" IN (202, -1))))"
        );
        assert_eq!(p.columns(), ["finished_at", "Claim", "code"]);
        assert_eq!(
            Pred::parse("NOT done IS TRUE").unwrap().render(&q),
            "(NOT (t.\"done\" IS TRUE))"
        );
    }

    #[test]
    fn refuses_anything_outside_the_grammar() {
        for bad in [
            "",
            "a = 1; DROP TABLE t",
            "a = b",
            "a = now()",
            "lower(a) = 'x'",
            "a IS",
            "a IN ()",
            "(a IS NULL",
            "a = 'x' --",
            "a = 1 OR",
            "a = '1'::int",
            "\"\" IS NULL",
            "a = 'open",
            "null IS NULL",
            "a NOT = 1",
            "a = 1.2.3",
        ] {
            assert!(Pred::parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
