//! Where the resolver gets environment variables, the home directory, the OS user name and the
//! default Unix-socket directory from; the process environment or a fake one in tests.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Source of environment variables, so tests can inject a fake environment.
pub(crate) trait Env {
    /// The value of an environment variable; `None` when unset or not valid UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory (for `~/.pgpass` and `~/.postgresql/`).
    fn home(&self) -> Option<PathBuf>;
}

/// The real process environment. `home()` follows libpq: `HOME`, else the password database entry
/// of the effective user.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn home(&self) -> Option<PathBuf> {
        match std::env::var_os("HOME") {
            Some(home) if !home.is_empty() => Some(PathBuf::from(home)),
            _ => passwd_entry_for_current_user().map(|e| PathBuf::from(e.home)),
        }
    }
}

/// A fake environment: the map holds variables, and `HOME` doubles as the home directory.
impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }
}

/// A non-empty variable: libpq treats an empty `PGUSER=` like an unset one for defaults.
pub(crate) fn non_empty(env: &dyn Env, name: &str) -> Option<String> {
    env.var(name).filter(|v| !v.is_empty())
}

/// The OS user name, used as the default role and database: `USER`, `LOGNAME`, then the password
/// database entry of the effective user (what libpq itself uses; the variables come first so that
/// a fake environment fully controls the result).
pub(crate) fn os_user(env: &dyn Env) -> Option<String> {
    non_empty(env, "USER")
        .or_else(|| non_empty(env, "LOGNAME"))
        .or_else(|| passwd_entry_for_current_user().map(|e| e.name))
}

/// The socket directories a PostgreSQL build may have compiled in, Debian's first, upstream's last.
pub(crate) const SOCKET_DIR_CANDIDATES: [&str; 3] =
    ["/var/run/postgresql", "/run/postgresql", "/tmp"];

/// libpq's default host: the first candidate socket directory that exists on this machine.
pub(crate) fn default_socket_dir() -> PathBuf {
    SOCKET_DIR_CANDIDATES
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .unwrap_or(Path::new("/tmp"))
        .to_path_buf()
}

/// Whether a socket directory is one that some libpq build uses by default; pgpass entries for
/// `localhost` apply to those (libpq compares with its single compiled-in directory; accepting all
/// candidates keeps a pgpass written for Debian's or upstream's libpq working here).
pub(crate) fn is_default_socket_dir(dir: &Path) -> bool {
    SOCKET_DIR_CANDIDATES.iter().any(|c| Path::new(c) == dir)
}

struct PasswdEntry {
    name: String,
    home: String,
}

/// The `/etc/passwd` entry of the effective user. The uid comes from the owner of `/proc/self`,
/// which is the effective uid, so no `unsafe` libc call is needed.
fn passwd_entry_for_current_user() -> Option<PasswdEntry> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd_entry(&passwd, uid)
}

fn passwd_entry(passwd: &str, uid: u32) -> Option<PasswdEntry> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            [name, _, id, _, _, home, ..] if id.parse() == Ok(uid) && !name.is_empty() => {
                Some(PasswdEntry {
                    name: (*name).to_string(),
                    home: (*home).to_string(),
                })
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lookup_finds_the_uid() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n#junk\napp:x:1000:1000::/home/app:/bin/sh\n";
        let e = passwd_entry(passwd, 1000).expect("entry");
        assert_eq!((e.name.as_str(), e.home.as_str()), ("app", "/home/app"));
        assert!(passwd_entry(passwd, 42).is_none());
    }

    #[test]
    fn user_comes_from_user_then_logname() {
        let mut env = HashMap::new();
        env.insert("LOGNAME".to_string(), "logname".to_string());
        assert_eq!(os_user(&env).as_deref(), Some("logname"));
        env.insert("USER".to_string(), "user".to_string());
        assert_eq!(os_user(&env).as_deref(), Some("user"));
    }

    #[test]
    fn default_socket_dir_is_a_candidate() {
        assert!(is_default_socket_dir(&default_socket_dir()));
        assert!(!is_default_socket_dir(Path::new("/srv/pg")));
    }
}
