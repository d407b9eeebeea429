//! Connection service files (`pg_service.conf`) with libpq's rules: the service named by
//! `service=` or `PGSERVICE` is looked up first in the user's file (`servicefile`, else
//! `PGSERVICEFILE`, which must exist, else `~/.pg_service.conf` when it exists), then in the system file
//! `PGSYSCONFDIR/pg_service.conf` (Debian's libpq: `/etc/postgresql-common/pg_service.conf`).
//! Its settings fill only what the connection string left unset, and themselves win over the
//! `PG*` variables. The file syntax is libpq 15's: `[name]` sections of `keyword=value` lines, no
//! spaces around `=`, `#` comments.

use super::env::{Env, non_empty};
use crate::report::failure::ConnFailure;
use std::path::{Path, PathBuf};

/// Where the system-wide file lives when `PGSYSCONFDIR` is unset (Debian's libpq).
const SYSCONFDIR: &str = "/etc/postgresql-common";

/// The settings of service `name`, in file order; `servicefile` is the connection string's
/// `servicefile`, if any.
pub(crate) fn lookup(
    name: &str,
    servicefile: Option<&str>,
    env: &dyn Env,
) -> anyhow::Result<Vec<(String, String)>> {
    let named = servicefile
        .map(PathBuf::from)
        .or_else(|| non_empty(env, "PGSERVICEFILE").map(PathBuf::from));
    // A file named explicitly must exist; only ~/.pg_service.conf is optional.
    if let Some(file) = named.as_ref().filter(|f| !f.exists()) {
        return Err(failed(ConnFailure::ServiceFileMissing {
            file: file.clone(),
        }));
    }
    let user_file = named.or_else(|| env.home().map(|h| h.join(".pg_service.conf")));
    let system_dir = non_empty(env, "PGSYSCONFDIR").unwrap_or_else(|| SYSCONFDIR.to_string());
    let system_file = Path::new(&system_dir).join("pg_service.conf");
    for file in user_file.into_iter().chain([system_file]) {
        if !file.exists() {
            continue;
        }
        if let Some(pairs) = parse(&file, name)? {
            return Ok(pairs);
        }
    }
    Err(failed(ConnFailure::ServiceUndefined {
        name: name.to_owned(),
    }))
}

/// The section `[name]` of `file`, or `None` when the file has no such section.
fn parse(file: &Path, name: &str) -> anyhow::Result<Option<Vec<(String, String)>>> {
    let text = std::fs::read(file).map_err(|e| {
        failed(ConnFailure::ServiceFileUnreadable {
            file: file.to_owned(),
            error: e.to_string(),
        })
    })?;
    let text = String::from_utf8_lossy(&text);
    let mut pairs: Option<Vec<(String, String)>> = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let syntax = || {
            failed(ConnFailure::ServiceSyntax {
                file: file.to_owned(),
                line: number + 1,
            })
        };
        if let Some(section) = line.strip_prefix('[') {
            if pairs.is_some() {
                break;
            }
            // libpq 15 compares the name and the "]" after it; what follows is ignored.
            if section
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(']'))
            {
                pairs = Some(Vec::new());
            }
            continue;
        }
        let Some(found) = pairs.as_mut() else {
            continue;
        };
        let (key, value) = line.split_once('=').ok_or_else(syntax)?;
        if key == "service" {
            return Err(failed(ConnFailure::ServiceNested {
                file: file.to_owned(),
                line: number + 1,
            }));
        }
        if !super::params::is_keyword(key) {
            return Err(syntax());
        }
        found.push((key.to_string(), value.to_string()));
    }
    Ok(pairs)
}

fn failed(failure: ConnFailure) -> anyhow::Error {
    anyhow::Error::new(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn user_file_first_then_system_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let sys = dir.path().join("etc");
        std::fs::create_dir_all(&home).expect("mkdir");
        std::fs::create_dir_all(&sys).expect("mkdir");
        std::fs::write(
            home.join(".pg_service.conf"),
            "# mine\n[a]\nhost=user-a\n\n[c]\nport=1\n",
        )
        .expect("write");
        std::fs::write(
            sys.join("pg_service.conf"),
            "[a]\nhost=sys-a\n[b]\nhost=sys-b\ndbname=x=y\n",
        )
        .expect("write");
        let e = env(&[
            ("HOME", home.to_str().expect("utf8")),
            ("PGSYSCONFDIR", sys.to_str().expect("utf8")),
        ]);
        let a = lookup("a", None, &e).expect("a");
        assert_eq!(a, vec![("host".into(), "user-a".into())]);
        let b = lookup("b", None, &e).expect("b");
        assert_eq!(b[0], ("host".into(), "sys-b".into()));
        assert_eq!(b[1], ("dbname".into(), "x=y".into()));
        let err = lookup("zzz", None, &e).expect_err("missing");
        assert_eq!(err.to_string(), "definition of service \"zzz\" not found");
    }

    #[test]
    fn bad_lines_are_errors_with_line_numbers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("s.conf");
        let e = env(&[("PGSERVICEFILE", file.to_str().expect("utf8"))]);
        for (text, want) in [
            ("[a]\nhost db\n", "syntax error in service file"),
            ("[a]\nhost =db\n", "syntax error in service file"),
            ("[a]\nbogus=1\n", "syntax error in service file"),
            (
                "[a]\nservice=b\n",
                "nested service specifications not supported",
            ),
        ] {
            std::fs::write(&file, text).expect("write");
            let err = lookup("a", None, &e).expect_err(text).to_string();
            assert!(err.starts_with(want) && err.ends_with("line 2"), "{err}");
        }
        // Other sections' mistakes are not looked at.
        std::fs::write(&file, "[b]\nnonsense\n[a]\nport=5\n").expect("write");
        assert_eq!(lookup("a", None, &e).expect("a").len(), 1);
    }
}
