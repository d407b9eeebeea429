//! Connection service files, compared with psql on the same files and server: `service=` and
//! `PGSERVICE`, the user file (`PGSERVICEFILE`, else `~/.pg_service.conf`) before the system file
//! (`PGSYSCONFDIR/pg_service.conf`), explicit settings over the service's, the service's over the
//! `PG*` variables, and libpq's errors. A wrong database in the layer that must lose makes a case
//! fail if the precedence is wrong.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::Schema;
use crate::support::tcp::{PASSWORD, TcpDb, Transport};
use crate::support::{Cmd, Run};

const PSQL: &str = "/usr/bin/psql";

/// One case: files to write (relative to the case directory: `home/.pg_service.conf`,
/// `etc/pg_service.conf`, `other.conf`), variables, and the conninfo (`-d`, may be empty).
struct Case {
    name: &'static str,
    files: Vec<(&'static str, String)>,
    vars: Vec<(&'static str, String)>,
    conninfo: String,
    connects: bool,
}

fn psql(dir: &Path, case: &Case) -> Run {
    assert!(
        Path::new(PSQL).exists(),
        "{PSQL} is missing: apt-get install postgresql-client, or run scripts/test, which installs it"
    );
    let mut cmd = Cmd::of(PSQL).args(["-X", "-w", "-A", "-t", "-c", "select 1"]);
    if !case.conninfo.is_empty() {
        cmd = cmd.args(["-d", &case.conninfo]);
    }
    with_env(cmd, dir, case)
        .timeout(Duration::from_secs(30))
        .run()
}

fn idemctl(dir: &Path, case: &Case) -> Run {
    let mut cmd = Cmd::new().args(["stats", "-o", "json", "--connect-timeout", "5s"]);
    if !case.conninfo.is_empty() {
        cmd = cmd.args(["-d", &case.conninfo]);
    }
    with_env(cmd, dir, case).run()
}

fn with_env(mut cmd: Cmd, dir: &Path, case: &Case) -> Cmd {
    cmd = cmd
        .env("HOME", dir.join("home"))
        .env("PGSYSCONFDIR", dir.join("etc"))
        .env("PGPASSWORD", PASSWORD);
    for (key, value) in &case.vars {
        cmd = cmd.env(key, value);
    }
    cmd
}

/// psql's one-line reason: after "psql: error: " and any "failed: ", without "FATAL:  ".
fn psql_reason(run: &Run) -> String {
    let line = run.stderr.lines().next().unwrap_or_default();
    let line = line.trim_start_matches("psql: error: ");
    let line = line.rsplit_once("failed: ").map_or(line, |(_, r)| r);
    line.trim_start_matches("FATAL:  ").trim_end().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_files_resolve_exactly_as_psql_resolves_them() {
    let db = TcpDb::new(Transport::TlsOptional).await;
    db.exec(Schema::Corrected.ddl()).await;
    let section = |name: &str, dbname: &str| {
        format!(
            "[{name}]\nhost=localhost\nport={}\nuser={}\ndbname={dbname}\n",
            db.port(),
            db.user
        )
    };
    let right = db.dbname.clone();
    let wrong = format!("{}_wrong", db.dbname);
    let user_file = "home/.pg_service.conf";
    let sys_file = "etc/pg_service.conf";
    let s = |v: &str| v.to_string();
    let cases = vec![
        Case {
            name: "service= from the user file",
            files: vec![(user_file, section("s", &right))],
            vars: vec![],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "a section header with trailing text names the section before it",
            files: vec![(
                user_file,
                section("s", &right).replacen("[s]", "[s] trailing", 1),
            )],
            vars: vec![],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "PGSERVICE, no conninfo",
            files: vec![(user_file, section("s", &right))],
            vars: vec![("PGSERVICE", s("s"))],
            conninfo: String::new(),
            connects: true,
        },
        Case {
            name: "an explicit setting beats the service's",
            files: vec![(user_file, section("s", &wrong))],
            vars: vec![],
            conninfo: format!("service=s dbname={right}"),
            connects: true,
        },
        Case {
            name: "the service beats PGDATABASE",
            files: vec![(user_file, section("s", &right))],
            vars: vec![("PGDATABASE", wrong.clone())],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "PGDATABASE loses to a wrong service setting",
            files: vec![(user_file, section("s", &wrong))],
            vars: vec![("PGDATABASE", right.clone())],
            conninfo: s("service=s"),
            connects: false,
        },
        Case {
            name: "the user file before the system file",
            files: vec![
                (user_file, section("s", &right)),
                (sys_file, section("s", &wrong)),
            ],
            vars: vec![],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "the system file when the user file lacks the section",
            files: vec![
                (user_file, section("other", &wrong)),
                (sys_file, section("s", &right)),
            ],
            vars: vec![],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "PGSERVICEFILE instead of ~/.pg_service.conf",
            files: vec![
                (user_file, section("s", &wrong)),
                ("other.conf", section("s", &right)),
            ],
            vars: vec![("PGSERVICEFILE", s("other.conf"))],
            conninfo: s("service=s"),
            connects: true,
        },
        Case {
            name: "a missing PGSERVICEFILE is an error, even with the system file",
            files: vec![(sys_file, section("s", &right))],
            vars: vec![("PGSERVICEFILE", s("missing.conf"))],
            conninfo: s("service=s"),
            connects: false,
        },
        Case {
            name: "an unknown service",
            files: vec![(user_file, section("s", &right))],
            vars: vec![],
            conninfo: s("service=nope"),
            connects: false,
        },
        Case {
            name: "a line without =",
            files: vec![(user_file, s("[s]\nhost localhost\n"))],
            vars: vec![],
            conninfo: s("service=s"),
            connects: false,
        },
        Case {
            name: "a nested service",
            files: vec![(user_file, s("[s]\nservice=t\n"))],
            vars: vec![],
            conninfo: s("service=s"),
            connects: false,
        },
    ];
    let mut problems = Vec::new();
    for mut case in cases {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["home", "etc"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        for (file, text) in &case.files {
            std::fs::write(dir.path().join(file), text).unwrap();
        }
        // Relative file names in variables are the case directory's.
        for (_, value) in &mut case.vars {
            if value.ends_with(".conf") {
                *value = dir.path().join(&*value).display().to_string();
            }
        }
        let theirs = psql(dir.path(), &case);
        let ours = idemctl(dir.path(), &case);
        if (theirs.code == 0) != case.connects {
            problems.push(format!(
                "{}: psql does not behave as the case says\n{theirs}",
                case.name
            ));
        }
        if (ours.code == 0) != (theirs.code == 0) {
            problems.push(format!(
                "{}: psql and idemctl disagree\n{theirs}\n{ours}",
                case.name
            ));
        } else if theirs.code != 0 {
            let reason = psql_reason(&theirs).replace(&dir.path().display().to_string(), "");
            let said = ours.stderr.replace(&dir.path().display().to_string(), "");
            if !said.contains(&reason) || ours.stderr.lines().count() != 1 {
                problems.push(format!(
                    "{}: idemctl does not say psql's reason {reason:?}\n{ours}",
                    case.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
