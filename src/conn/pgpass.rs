//! The libpq password file (`~/.pgpass`, `passfile`, `PGPASSFILE`): permission check, parsing with
//! libpq's escapes and wildcards, and first-match lookup.
//!
//! Warnings name the file and a line number only; a line may hold a password.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::report::failure::ConnWarning;

/// What a pgpass line is matched against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lookup<'a> {
    /// Host name, socket directory, or `localhost` for the default socket directory.
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) dbname: &'a str,
    pub(crate) user: &'a str,
}

/// The file's contents if it exists and is safe to use. A missing file is normal and silent; an
/// unsafe or unreadable one is skipped with a warning, as libpq does.
pub(crate) fn read(path: &Path, warnings: &mut Vec<ConnWarning>) -> Option<Vec<u8>> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => {
            warnings.push(ConnWarning::PasswordFileUnreadable {
                file: path.to_owned(),
                error: e.to_string(),
            });
            return None;
        }
    };
    if !meta.is_file() {
        warnings.push(ConnWarning::PasswordFileNotPlain {
            file: path.to_owned(),
        });
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        warnings.push(ConnWarning::PasswordFileLoose {
            file: path.to_owned(),
        });
        return None;
    }
    match std::fs::read(path) {
        Ok(contents) => Some(contents),
        Err(e) => {
            warnings.push(ConnWarning::PasswordFileUnreadable {
                file: path.to_owned(),
                error: e.to_string(),
            });
            None
        }
    }
}

/// The password of the first line matching `lookup`. Lines with fewer than five fields are skipped
/// with a warning. An empty password on the first match means "no password", as in libpq.
pub(crate) fn find(
    contents: &[u8],
    path: &Path,
    lookup: Lookup<'_>,
    warnings: &mut Vec<ConnWarning>,
) -> Option<Vec<u8>> {
    let port = lookup.port.to_string();
    let wanted: [&[u8]; 4] = [
        lookup.host.as_bytes(),
        port.as_bytes(),
        lookup.dbname.as_bytes(),
        lookup.user.as_bytes(),
    ];
    for (index, line) in contents.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let fields = split_fields(line);
        if fields.len() < 5 {
            warnings.push(ConnWarning::PasswordFileShortLine {
                file: path.to_owned(),
                line: index + 1,
            });
            continue;
        }
        if fields
            .iter()
            .zip(wanted)
            .all(|(field, want)| field.matches(want))
        {
            return Some(fields[4].value.clone()).filter(|pw| !pw.is_empty());
        }
    }
    None
}

/// One field: its unescaped value, and whether it was the bare wildcard `*` (`\*` is a literal).
struct Field {
    value: Vec<u8>,
    wildcard: bool,
}

impl Field {
    fn matches(&self, wanted: &[u8]) -> bool {
        self.wildcard || self.value == wanted
    }
}

/// Split at unescaped colons; `\` escapes the next byte (so `\:` and `\\`).
fn split_fields(line: &[u8]) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut value = Vec::new();
    let mut raw_star = true;
    let mut bytes = line.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => {
                raw_star = false;
                if let Some(&escaped) = bytes.next() {
                    value.push(escaped);
                }
            }
            b':' => {
                let wildcard = raw_star && value == b"*";
                fields.push(Field {
                    value: std::mem::take(&mut value),
                    wildcard,
                });
                raw_star = true;
            }
            _ => value.push(b),
        }
    }
    let wildcard = raw_star && value == b"*";
    fields.push(Field { value, wildcard });
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const FILE: &str = "\
# comment line
db1:5432:app:app:first
db1:5432:app:app:second
*:*:other:*:wild
h\\:x:5432:\\*:u:esc\\:aped\\\\pw:ignored
broken:line
localhost:5432:*:*:socket
db2:5432:*:*:
db2:*:*:*:never
";

    fn find_in(host: &str, port: u16, dbname: &str, user: &str) -> (Option<String>, Vec<String>) {
        let mut warnings = Vec::new();
        let lookup = Lookup {
            host,
            port,
            dbname,
            user,
        };
        let pw = find(FILE.as_bytes(), &PathBuf::from("/p"), lookup, &mut warnings);
        (
            pw.map(|p| String::from_utf8(p).expect("utf8")),
            warnings.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn first_match_wins() {
        assert_eq!(
            find_in("db1", 5432, "app", "app").0.as_deref(),
            Some("first")
        );
    }

    #[test]
    fn wildcards_match_anything() {
        assert_eq!(find_in("x", 1, "other", "y").0.as_deref(), Some("wild"));
    }

    #[test]
    fn escapes_and_literal_star() {
        assert_eq!(
            find_in("h:x", 5432, "*", "u").0.as_deref(),
            Some(r"esc:aped\pw")
        );
        assert_eq!(find_in("h:x", 5432, "app", "u").0, None);
    }

    #[test]
    fn port_is_compared_as_number_text() {
        assert_eq!(find_in("db1", 5433, "app", "app").0, None);
    }

    #[test]
    fn empty_password_stops_the_search() {
        assert_eq!(find_in("db2", 5432, "d", "u").0, None);
    }

    #[test]
    fn short_lines_warn_with_line_number_only() {
        let (_, warnings) = find_in("nomatch", 1, "d", "u");
        assert_eq!(
            warnings,
            ["password file \"/p\" line 6: fewer than 5 colon-separated fields; line skipped"]
        );
    }

    #[test]
    fn permission_check_and_missing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pgpass");
        let mut warnings = Vec::new();
        assert_eq!(read(&path, &mut warnings), None);
        assert!(warnings.is_empty(), "a missing file is silent");

        std::fs::write(&path, "h:1:d:u:secretpw\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(read(&path, &mut warnings), None);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].to_string().contains("group or world access"));
        assert!(!warnings[0].to_string().contains("secretpw"));

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(read(&path, &mut warnings).is_some());
        assert!(
            read(dir.path(), &mut warnings).is_none(),
            "a directory is not a plain file"
        );
    }

    /// Property: any host, database, user and password, escaped the way libpq documents, is found
    /// again exactly; and random bytes never panic the parser.
    #[test]
    fn escaped_fields_round_trip_and_garbage_never_panics() {
        const ALPHABET: &[u8] = b"ab:\\*#x \t9-";
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let field = |next: &mut dyn FnMut() -> u64| -> String {
            let len = 1 + next() % 6;
            (0..len)
                .map(|_| char::from(ALPHABET[(next() % ALPHABET.len() as u64) as usize]))
                .collect()
        };
        let escape = |f: &str| f.replace('\\', "\\\\").replace(':', "\\:");
        for _ in 0..2000 {
            let (host, db, user, pw) = (
                field(&mut next),
                field(&mut next),
                field(&mut next),
                field(&mut next),
            );
            // A line that starts with '#' is a comment, and libpq has no escape for it.
            let host = if host.starts_with('#') {
                format!("h{host}")
            } else {
                host
            };
            let port = u16::try_from(next() % 65535 + 1).unwrap_or(5432);
            // A field that is exactly "*" would be a wildcard; libpq's escape for a literal star is "\*".
            let esc = |f: &str| {
                if f == "*" {
                    "\\*".to_owned()
                } else {
                    escape(f)
                }
            };
            let line = format!(
                "{}:{port}:{}:{}:{}\n",
                esc(&host),
                esc(&db),
                esc(&user),
                escape(&pw)
            );
            let mut warnings = Vec::new();
            let lookup = Lookup {
                host: &host,
                port,
                dbname: &db,
                user: &user,
            };
            let found = find(line.as_bytes(), &PathBuf::from("/p"), lookup, &mut warnings);
            assert_eq!(found.as_deref(), Some(pw.as_bytes()), "line {line:?}");
            let garbage: Vec<u8> = (0..next() % 64)
                .map(|_| u8::try_from(next() % 256).unwrap_or(0))
                .collect();
            let lookup = Lookup {
                host: "h",
                port: 5432,
                dbname: "d",
                user: "u",
            };
            let _ = find(&garbage, &PathBuf::from("/p"), lookup, &mut warnings);
        }
    }
}
