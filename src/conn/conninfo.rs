//! Tokenising of libpq connection strings, both keyword/value (`host=db1 port=5432`) and URI
//! (`postgresql://user@db1:5432/app?sslmode=require`), into ordered (keyword, value) pairs.
//!
//! Nothing here knows what a keyword means; `params.rs` validates them. Errors describe what is
//! wrong and where (a character position), never the text itself: the input may hold a password.

/// Keyword/value pairs in input order; a later duplicate overrides an earlier one, as in libpq.
pub(crate) type Pairs = Vec<(String, String)>;

pub(crate) use crate::report::failure::SyntaxError;

/// Tokenise a conninfo string or a URI.
pub(crate) fn tokenize(input: &str) -> Result<Pairs, SyntaxError> {
    for prefix in ["postgresql://", "postgres://"] {
        if let Some(rest) = input.strip_prefix(prefix) {
            return parse_uri(rest);
        }
    }
    if looks_like_other_uri(input) {
        return Err(SyntaxError::UnsupportedScheme);
    }
    parse_keyword_value(input)
}

/// `jdbc:postgresql://...` or `mysql://...` deserve a better message than "missing =".
fn looks_like_other_uri(input: &str) -> bool {
    let Some((scheme, _)) = input.trim_start().split_once("://") else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+.-:".contains(c))
}

type Cursor<'a> = std::iter::Peekable<std::iter::Enumerate<std::str::Chars<'a>>>;

fn parse_keyword_value(input: &str) -> Result<Pairs, SyntaxError> {
    let mut cur: Cursor<'_> = input.chars().enumerate().peekable();
    let mut pairs = Pairs::new();
    loop {
        skip_whitespace(&mut cur);
        let Some(&(start, _)) = cur.peek() else {
            return Ok(pairs);
        };
        let mut key = String::new();
        while let Some(&(_, c)) = cur.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            cur.next();
        }
        skip_whitespace(&mut cur);
        if cur.next().map(|(_, c)| c) != Some('=') {
            return Err(SyntaxError::MissingEquals {
                position: start + 1,
            });
        }
        if key.is_empty() {
            return Err(SyntaxError::EmptyKeyword {
                position: start + 1,
            });
        }
        skip_whitespace(&mut cur);
        let value = read_value(&mut cur)?;
        pairs.push((key, value));
    }
}

fn skip_whitespace(cur: &mut Cursor<'_>) {
    while cur.next_if(|(_, c)| c.is_whitespace()).is_some() {}
}

/// A value: single-quoted (backslash escapes any character, notably `\'` and `\\`) or bare up to
/// the next whitespace (where a backslash also escapes, as in libpq).
fn read_value(cur: &mut Cursor<'_>) -> Result<String, SyntaxError> {
    let mut value = String::new();
    if cur.next_if(|&(_, c)| c == '\'').is_some() {
        loop {
            match cur.next().map(|(_, c)| c) {
                None => return Err(SyntaxError::UnterminatedQuote),
                Some('\'') => return Ok(value),
                Some('\\') => match cur.next() {
                    Some((_, c)) => value.push(c),
                    None => return Err(SyntaxError::UnterminatedQuote),
                },
                Some(c) => value.push(c),
            }
        }
    }
    while let Some((_, c)) = cur.next_if(|(_, c)| !c.is_whitespace()) {
        if c == '\\' {
            // libpq drops a trailing lone backslash rather than failing.
            if let Some((_, escaped)) = cur.next() {
                value.push(escaped);
            }
        } else {
            value.push(c);
        }
    }
    Ok(value)
}

/// `[user[:password]@][host][:port][,...][/dbname][?param=value&...]` (the part after `://`).
fn parse_uri(rest: &str) -> Result<Pairs, SyntaxError> {
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let mut pairs = Pairs::new();
    // The last `@` separates credentials, so an unencoded `@` in a password still parses.
    let hostlist = match authority.rfind('@') {
        Some(at) => {
            parse_userinfo(&authority[..at], &mut pairs)?;
            &authority[at + 1..]
        }
        None => authority,
    };
    parse_hostlist(hostlist, &mut pairs)?;
    let query = match after.strip_prefix('/') {
        Some(path) => {
            let (db, query) = path.split_once('?').unwrap_or((path, ""));
            push_non_empty(&mut pairs, "dbname", percent_decode(db)?);
            query
        }
        None => after.strip_prefix('?').unwrap_or(""),
    };
    parse_query(query, &mut pairs)?;
    Ok(pairs)
}

fn parse_userinfo(userinfo: &str, pairs: &mut Pairs) -> Result<(), SyntaxError> {
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (userinfo, None),
    };
    push_non_empty(pairs, "user", percent_decode(user)?);
    if let Some(password) = password {
        push_non_empty(pairs, "password", percent_decode(password)?);
    }
    Ok(())
}

/// `host[:port]` entries separated by commas; builds libpq-style comma lists for `host` and
/// `port`, with empty entries where a host or port was left out (both then mean "default").
fn parse_hostlist(list: &str, pairs: &mut Pairs) -> Result<(), SyntaxError> {
    if list.is_empty() {
        return Ok(());
    }
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    for entry in list.split(',') {
        let (host, port) = split_host_port(entry)?;
        hosts.push(percent_decode(host)?);
        ports.push(percent_decode(port.unwrap_or(""))?);
    }
    if hosts.iter().any(|h| !h.is_empty()) {
        pairs.push(("host".to_string(), hosts.join(",")));
    }
    if ports.iter().any(|p| !p.is_empty()) {
        pairs.push(("port".to_string(), ports.join(",")));
    }
    Ok(())
}

fn split_host_port(entry: &str) -> Result<(&str, Option<&str>), SyntaxError> {
    if let Some(bracketed) = entry.strip_prefix('[') {
        let close = bracketed.find(']').ok_or(SyntaxError::UnterminatedIpv6)?;
        let (addr, tail) = (&bracketed[..close], &bracketed[close + 1..]);
        if addr.is_empty() {
            return Err(SyntaxError::EmptyIpv6);
        }
        return match tail.strip_prefix(':') {
            Some(port) => Ok((addr, Some(port))),
            None if tail.is_empty() => Ok((addr, None)),
            None => Err(SyntaxError::UnexpectedAfterIpv6),
        };
    }
    Ok(match entry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    })
}

fn parse_query(query: &str, pairs: &mut Pairs) -> Result<(), SyntaxError> {
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param
            .split_once('=')
            .ok_or(SyntaxError::QueryParamWithoutValue)?;
        let (key, value) = (percent_decode(key)?, percent_decode(value)?);
        // JDBC spelling, accepted by libpq for compatibility.
        if key == "ssl" && value == "true" {
            pairs.push(("sslmode".to_string(), "require".to_string()));
        } else {
            pairs.push((key, value));
        }
    }
    Ok(())
}

fn push_non_empty(pairs: &mut Pairs, key: &str, value: String) {
    if !value.is_empty() {
        pairs.push((key.to_string(), value));
    }
}

fn percent_decode(text: &str) -> Result<String, SyntaxError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .ok_or(SyntaxError::BadPercentEncoding)?;
            let byte = hex_pair(hex).ok_or(SyntaxError::BadPercentEncoding)?;
            if byte == 0 {
                return Err(SyntaxError::PercentEncodedNul);
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| SyntaxError::NotUtf8)
}

fn hex_pair(hex: &[u8]) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    match hex {
        [hi, lo] => Some((digit(*hi)? * 16 + digit(*lo)?) as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(input: &str) -> Vec<(String, String)> {
        tokenize(input).expect("parses")
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keyword_value_with_quotes_and_escapes() {
        let got = pairs(r"host = db1  password='a b\'c\\d' user=x\ y dbname=''");
        let want = kv(&[
            ("host", "db1"),
            ("password", r"a b'c\d"),
            ("user", "x y"),
            ("dbname", ""),
        ]);
        assert_eq!(got, want);
        assert!(pairs("   ").is_empty());
    }

    #[test]
    fn keyword_value_errors_have_positions() {
        assert_eq!(
            tokenize("host=a secret"),
            Err(SyntaxError::MissingEquals { position: 8 })
        );
        assert_eq!(
            tokenize("password='abc"),
            Err(SyntaxError::UnterminatedQuote)
        );
        assert_eq!(
            tokenize("password='abc\\"),
            Err(SyntaxError::UnterminatedQuote)
        );
        assert_eq!(
            tokenize(" =x"),
            Err(SyntaxError::EmptyKeyword { position: 2 })
        );
    }

    #[test]
    fn uri_with_everything() {
        let got = pairs(
            "postgresql://us%40er:p%3Ass@db1:5433,[::1],db3:6000/my%20db?sslmode=verify-full&application_name=x%26y",
        );
        let want = kv(&[
            ("user", "us@er"),
            ("password", "p:ss"),
            ("host", "db1,::1,db3"),
            ("port", "5433,,6000"),
            ("dbname", "my db"),
            ("sslmode", "verify-full"),
            ("application_name", "x&y"),
        ]);
        assert_eq!(got, want);
    }

    #[test]
    fn uri_socket_directory_forms() {
        assert_eq!(
            pairs("postgres://%2Fvar%2Frun%2Fpostgresql/app"),
            kv(&[("host", "/var/run/postgresql"), ("dbname", "app")])
        );
        assert_eq!(
            pairs("postgresql:///app?host=/tmp&port=5433"),
            kv(&[("dbname", "app"), ("host", "/tmp"), ("port", "5433")])
        );
        assert!(pairs("postgresql://").is_empty());
    }

    #[test]
    fn uri_password_with_raw_at_sign() {
        let got = pairs("postgresql://app:p@ss@db1/app");
        assert_eq!(got[1], ("password".to_string(), "p@ss".to_string()));
        assert_eq!(got[2], ("host".to_string(), "db1".to_string()));
    }

    #[test]
    fn uri_ssl_true_means_require() {
        assert_eq!(
            pairs("postgresql://h/?ssl=true"),
            kv(&[("host", "h"), ("sslmode", "require")])
        );
    }

    #[test]
    fn uri_errors() {
        let cases = [
            ("postgresql://h/db?%zz=1", SyntaxError::BadPercentEncoding),
            ("postgresql://h/db%2", SyntaxError::BadPercentEncoding),
            ("postgresql://h/db%00", SyntaxError::PercentEncodedNul),
            ("postgresql://h/db%ff", SyntaxError::NotUtf8),
            ("postgresql://[::1/db", SyntaxError::UnterminatedIpv6),
            ("postgresql://[]/db", SyntaxError::EmptyIpv6),
            ("postgresql://[::1]x/db", SyntaxError::UnexpectedAfterIpv6),
            (
                "postgresql://h/db?sslmode",
                SyntaxError::QueryParamWithoutValue,
            ),
            ("mysql://u:pw@h/db", SyntaxError::UnsupportedScheme),
            ("jdbc:postgresql://h/db", SyntaxError::UnsupportedScheme),
        ];
        for (input, want) in cases {
            assert_eq!(tokenize(input), Err(want), "{input}");
        }
    }

    #[test]
    fn error_messages_never_contain_input() {
        for input in ["password='hunter2", "host=x hunter2", "mysql://u:hunter2@h"] {
            let msg = tokenize(input).expect_err("fails").to_string();
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }
}
