//! The configuration file end to end: a key table no built-in profile knows (its own DDL, every
//! column named differently, a bigint tenant, a hex text fingerprint, an in-flight predicate) is
//! mapped in a TOML file and checked, inspected, counted, evicted and reclaimed through the
//! mapping; the file's defaults yield to the environment and the flags; a bad file is one line
//! naming the file and the key, exit 2.

use crate::fixtures::{finding, loaded, scalar_i64, scalar_text};
use crate::support::TestDb;

pub(crate) const GENERIC_DDL: &str = include_str!("../fixtures/generic_schema.sql");

/// The indexes `check` recommends for the mapping: expiry, and the optional in-flight index.
pub(crate) const GENERIC_INDEXES: &str = "CREATE INDEX request_log_valid_until ON request_log (valid_until); \
     CREATE INDEX request_log_in_flight ON request_log ((coalesce(claimed_at, inserted_at))) \
     WHERE http_status IS NULL AND claimed_at IS NOT NULL;";

/// docs/profiles.md, where the table profiles and the configuration file are documented.
pub(crate) fn profiles_doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/profiles.md")).unwrap()
}

/// The mapping of `request_log`: the example of docs/profiles.md's "Configuration file" section,
/// as printed, so the documented example is the one the tests run.
pub(crate) fn generic_config() -> String {
    let readme = profiles_doc();
    let section = readme
        .split("\n## Configuration file\n")
        .nth(1)
        .expect("docs/profiles.md has a Configuration file section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a toml example");
    format!("{block}\n")
}

/// Rows of `request_log`, `n` of each kind, accounts 1..5: `done-old-*` (answered, expired a day
/// ago), `done-new-*` (answered, valid for a day), `stuck-*` (claimed an hour ago, no answer),
/// `fresh-*` (claimed 10 s ago), `stuck-old-*` (claimed 3 days ago and expired: still in flight).
pub(crate) fn generic_rows(n: i64) -> String {
    let row = |kind: &str,
               status: &str,
               reply: &str,
               inserted: &str,
               claimed: &str,
               until: &str| {
        format!(
            "INSERT INTO request_log (account, request_id, body_sha256, verb, route, http_status, reply, inserted_at, claimed_at, valid_until) \
             SELECT 1 + g % 5, '{kind}-' || g, encode(sha256(g::text::bytea), 'hex'), 'POST', '/v1/transfers', \
             {status}, {reply}, {inserted}, {claimed}, {until} \
             FROM generate_series(1, {n}) AS g;"
        )
    };
    let reply = "jsonb_build_object('id', 'tr_' || g)";
    let old = "now() - interval '2 days' - g * interval '1 second'";
    [
        row(
            "done-old",
            "201",
            reply,
            old,
            "NULL",
            "now() - interval '1 day' - g * interval '1 second'",
        ),
        row(
            "done-new",
            "200",
            reply,
            "now() - interval '1 hour'",
            "NULL",
            "now() + interval '1 day'",
        ),
        row(
            "stuck",
            "NULL",
            "NULL",
            "now() - interval '1 hour'",
            "now() - interval '1 hour'",
            "now() + interval '23 hours'",
        ),
        row(
            "fresh",
            "NULL",
            "NULL",
            "now() - interval '10 seconds'",
            "now() - interval '10 seconds'",
            "now() + interval '1 day'",
        ),
        row(
            "stuck-old",
            "NULL",
            "NULL",
            "now() - interval '3 days'",
            "now() - interval '3 days'",
            "now() - interval '2 days'",
        ),
    ]
    .concat()
}

/// A second mapped shape: a uuid key without a tenant, a state column, no lock time, a smallint
/// status and a json body, and no expiry column (keys expire 12 h after `born`, the file's ttl).
pub(crate) const JOBS_DDL: &str = "CREATE TABLE jobs_keys (tok uuid PRIMARY KEY, born timestamptz NOT NULL, \
     phase text NOT NULL, code smallint, answer json);";

pub(crate) const JOBS_CONFIG: &str = r#"table = "jobs_keys"
ttl = "12h"
[profiles.jobs]
key = "tok"
created_at = "born"
response_status = "code"
response_body = "answer"
in_flight = { column = "phase", values = ["running"], done = ["error", "ok"] }
actions = ["fail"]
"#;

struct Mapped {
    db: TestDb,
    dir: tempfile::TempDir,
}

impl Mapped {
    /// `request_log` with `n` rows of each kind and the indexes check recommends.
    async fn new(n: i64, config: &str) -> Mapped {
        Mapped::with(n, config, Some(GENERIC_INDEXES)).await
    }

    /// `request_log` with `n` rows of each kind and `indexes` (none: only its primary key).
    async fn with(n: i64, config: &str, indexes: Option<&str>) -> Mapped {
        let db = loaded(GENERIC_DDL, &generic_rows(n), indexes).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("idemctl.toml"), config).unwrap();
        Mapped { db, dir }
    }

    fn config(&self) -> String {
        self.dir
            .path()
            .join("idemctl.toml")
            .to_string_lossy()
            .into_owned()
    }

    /// idemctl with `--config` naming the file.
    fn idemctl(&self) -> crate::support::cmd::Cmd {
        self.db.idemctl().args(["--config", &self.config()])
    }

    /// reclaim --action fail, named explicitly (as reclaim asks for fail).
    fn reclaim_with_fail(&self) {
        self.idemctl()
            .args(["-q", "reclaim", "--yes", "--action", "fail"])
            .run()
            .assert_success();
    }

    /// Stuck keys (`stuck-*` and `stuck-old-*`) that hold reclaim's stored error response.
    async fn failed_stuck(&self) -> i64 {
        scalar_i64(
            &self.db,
            "SELECT count(*) FROM request_log WHERE request_id LIKE 'stuck%' AND http_status = 500 AND reply ? 'type'",
        )
        .await
    }

    async fn count(&self, prefix: &str) -> i64 {
        scalar_i64(
            &self.db,
            &format!("SELECT count(*) FROM request_log WHERE request_id LIKE '{prefix}-%'"),
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_the_mapping_it_used_and_finds_the_tables_indexes() {
    let m = Mapped::new(3, &generic_config()).await;
    let run = m.idemctl().args(["-o", "json", "check"]).run();
    run.assert_success();
    let json = run.json();
    let profile = finding(&json, "profile")["detail"].as_str().unwrap();
    assert!(
        profile.starts_with("ledger: the mapping in config file ")
            && profile.ends_with("idemctl.toml, [profiles.ledger]"),
        "{run}"
    );
    assert_eq!(finding(&json, "columns")["status"], "ok", "{run}");
    assert!(
        finding(&json, "expiry index")["detail"]
            .as_str()
            .unwrap()
            .starts_with("request_log_valid_until orders keys by valid_until"),
        "{run}"
    );
    // Without the file, nothing fits: the error names the roles each profile could not find and
    // points to the config file.
    let run = m.db.idemctl().args(["-t", "request_log", "check"]).run();
    run.assert_code(2)
        .assert_stderr_contains("matches no table profile (storage needs")
        .assert_stderr_contains("expiry column expires_at")
        .assert_stderr_contains("map the table's columns in a config file with --config");
    // A mapping naming a column the table lacks is refused with the mapping's place.
    std::fs::write(
        m.config(),
        generic_config().replace("\"reply\"", "\"answer\""),
    )
    .unwrap();
    m.idemctl()
        .arg("stats")
        .run()
        .assert_code(2)
        .assert_stderr_contains(
            "has no column answer, which profile ledger needs; the mapping in config file",
        )
        .assert_stderr_contains("[profiles.ledger] names it; correct the mapping");
}

/// The commands of docs/profiles.md's "Configuration file" section, as printed, run against the mapped
/// table (the file named idemctl.toml in the working directory), and reclaim's dry run with the
/// mapping's default action: each succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_configuration_examples_run_as_written() {
    let m = Mapped::new(3, &generic_config()).await;
    let readme = profiles_doc();
    let section = readme
        .split("\n## Configuration file\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section has a sh example");
    let mut lines: Vec<String> = block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_owned())
        .collect();
    lines.push("idemctl --config idemctl.toml reclaim --dry-run".to_owned());
    for line in lines {
        let mut words = line.split_whitespace().peekable();
        let mut cmd = m.db.idemctl().current_dir(m.dir.path());
        while let Some((k, v)) = words.peek().and_then(|w| w.split_once('=')) {
            cmd = cmd.env(k, v);
            words.next();
        }
        assert_eq!(words.next(), Some("idemctl"), "{line}");
        let run = cmd.args(words).run();
        assert_eq!(run.code, 0, "{line}\n{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_a_mapped_key_with_its_tenant_and_hex_fingerprint() {
    let m = Mapped::new(5, &generic_config()).await;
    let run = m
        .idemctl()
        .args(["-o", "json", "inspect", "stuck-2", "--api-key-id", "3"])
        .run();
    run.assert_success();
    let json = run.json();
    assert_eq!(json["state"], "in_progress", "{run}");
    assert_eq!(json["stuck"], true, "{run}");
    assert_eq!(json["request_path"], "/v1/transfers", "{run}");
    assert_eq!(json["request_method"], "POST", "{run}");
    assert_eq!(
        json["request_fingerprint"].as_str().unwrap().len(),
        64,
        "{run}"
    );
    let run = m
        .idemctl()
        .args(["-o", "json", "inspect", "done-new-4"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["state"], "completed", "{run}");
    assert_eq!(run.json()["response_status"], 200, "{run}");
    m.idemctl()
        .args(["inspect", "stuck-2", "--api-key-id", "4"])
        .run()
        .assert_code(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_evict_go_by_the_mapped_expiry_and_keep_keys_in_flight() {
    let m = Mapped::new(40, &generic_config()).await;
    let run = m.idemctl().args(["-o", "json", "stats"]).run();
    run.assert_success();
    let json = run.json();
    assert_eq!(json["expired_backlog"]["count"], 40, "{run}");
    m.idemctl().args(["-q", "evict"]).run().assert_success();
    assert_eq!(m.count("done-old").await, 0);
    assert_eq!(m.count("done-new").await, 40);
    assert_eq!(
        m.count("stuck").await,
        80,
        "stuck and stuck-old are in flight"
    );
    assert_eq!(m.count("fresh").await, 40);
    let run = m.idemctl().args(["-o", "json", "stats"]).run();
    run.assert_success();
    assert_eq!(run.json()["expired_backlog"]["count"], 0, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_fails_releases_or_deletes_as_the_mapping_allows() {
    let m = Mapped::new(4, &generic_config()).await;
    // The mapping's first action (fail) is the default, with its flags.
    for extra in [&[][..], &["--status", "503"][..]] {
        let run = m
            .idemctl()
            .args(["-o", "json", "reclaim", "--dry-run"])
            .args(extra)
            .run();
        run.assert_success();
        assert_eq!(run.json()["action"], "fail", "{run}");
    }
    // fail stores the error response.
    m.reclaim_with_fail();
    assert_eq!(m.failed_stuck().await, 8);
    assert_eq!(
        scalar_i64(
            &m.db,
            "SELECT count(*) FROM request_log WHERE request_id LIKE 'fresh-%' AND http_status IS NULL"
        )
        .await,
        4,
        "keys held for less than --older-than are left alone"
    );
    // Failed keys are no longer in flight: the expired ones are evicted.
    m.idemctl().args(["-q", "evict"]).run().assert_success();
    assert_eq!(m.count("done-old").await, 0);

    let m = Mapped::new(4, &generic_config()).await;
    m.idemctl()
        .args(["-q", "reclaim", "--yes", "--action", "release"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &m.db,
            "SELECT count(*) FROM request_log WHERE request_id LIKE 'stuck%' AND claimed_at IS NULL AND http_status IS NULL"
        )
        .await,
        8
    );
    m.idemctl()
        .args([
            "-q",
            "reclaim",
            "--yes",
            "--action",
            "delete",
            "--older-than",
            "5s",
            "--force",
        ])
        .run()
        .assert_success();
    assert_eq!(m.count("fresh").await, 0);
    assert_eq!(m.count("done-new").await, 4);

    // A mapping that allows only delete refuses the others, naming what it allows.
    let only_delete =
        generic_config().replace("[\"fail\", \"release\", \"delete\"]", "[\"delete\"]");
    let m = Mapped::new(2, &only_delete).await;
    m.idemctl()
        .args(["reclaim", "--yes", "--action", "fail"])
        .run()
        .assert_error(2, "--action fail does not fit table public.request_log (profile ledger): it allows delete");
    m.idemctl()
        .args(["reclaim", "--dry-run", "--status", "503"])
        .run()
        .assert_error(2, "--status only applies to --action fail, and the default action on table public.request_log (profile ledger) is delete; drop it or pass --action fail");
    // No action listed: reclaim refuses, pointing at the file.
    let none = generic_config().replace("actions = [\"fail\", \"release\", \"delete\"]\n", "");
    let m = Mapped::new(2, &none).await;
    m.idemctl()
        .args(["reclaim", "--yes"])
        .run()
        .assert_error(2, "profile ledger has no safe reclaim action for table public.request_log: its mapping lists none (set actions in the config file)");
    assert_eq!(m.count("stuck").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_column_mapping_with_a_ttl_from_the_file() {
    let db = TestDb::new().await;
    db.exec(JOBS_DDL).await;
    db.exec(
        "CREATE INDEX ON jobs_keys (born); \
         INSERT INTO jobs_keys SELECT gen_random_uuid(), now() - g * interval '1 hour', \
         CASE WHEN g % 4 = 0 THEN 'running' ELSE 'ok' END, 200, '{}' FROM generate_series(1, 48) g; \
         ANALYZE jobs_keys;",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, JOBS_CONFIG).unwrap();
    let path = path.to_string_lossy().into_owned();
    // Rows born more than 12 h ago (hours 13..48) that are done: 36 minus the 9 running ones.
    let run = db
        .idemctl()
        .env("IDEMCTL_CONFIG", &path)
        .args(["-o", "json", "stats"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["expired_backlog"]["count"], 27, "{run}");
    // --ttl on the command line wins over the file's.
    let run = db
        .idemctl()
        .env("IDEMCTL_CONFIG", &path)
        .args(["-o", "json", "--ttl", "36h", "stats"])
        .run();
    assert_eq!(run.json()["expired_backlog"]["count"], 9, "{run}");
    db.idemctl()
        .env("IDEMCTL_CONFIG", &path)
        .args(["-q", "evict"])
        .run()
        .assert_success();
    assert_eq!(scalar_i64(&db, "SELECT count(*) FROM jobs_keys").await, 21);
    db.idemctl()
        .env("IDEMCTL_CONFIG", &path)
        .args(["-q", "reclaim", "--yes", "--allow-scan", "--action", "fail"])
        .run()
        .assert_success();
    assert_eq!(
        scalar_i64(
            &db,
            "SELECT count(*) FROM jobs_keys WHERE phase = 'error' AND code = 500"
        )
        .await,
        12,
        "every running key older than 5 minutes was failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_and_environment_win_over_the_file() {
    let m = Mapped::new(1, &generic_config()).await;
    // The file names request_log; --table names another table, which has no mapping columns.
    m.db.exec("CREATE TABLE other_keys (x int)").await;
    for args in [["-t", "other_keys", "stats"], ["stats", "-t", "other_keys"]] {
        m.idemctl()
            .args(args)
            .run()
            .assert_code(2)
            .assert_stderr_contains("table public.other_keys has no column request_id");
    }
    m.idemctl()
        .env("IDEMCTL_TABLE", "other_keys")
        .arg("stats")
        .run()
        .assert_code(2)
        .assert_stderr_contains("table public.other_keys has no column request_id");
    // --profile names a built-in: the mapping is not used.
    m.idemctl()
        .args(["--profile", "storage", "stats"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("which profile storage needs");
    // The file's database_url is used only when no flag or variable gives one.
    let with_url = format!("database_url = \"{}\"\n{}", m.db.url(), generic_config());
    std::fs::write(m.config(), &with_url).unwrap();
    crate::support::cmd::Cmd::new()
        .args(["--config", &m.config(), "-q", "check"])
        .run()
        .assert_success();
    let broken = format!(
        "database_url = \"host=/nonexistent-dir\"\n{}",
        generic_config()
    );
    std::fs::write(m.config(), &broken).unwrap();
    m.idemctl().args(["-q", "check"]).run().assert_success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_is_one_line_naming_the_file_and_the_key() {
    let m = Mapped::new(1, "ttl = \"3 fortnights\"\n").await;
    let run = m.idemctl().arg("stats").run();
    run.assert_code(2);
    let config = m.config();
    assert!(
        run.stderr.starts_with(&format!(
            "idemctl: config file {config}: ttl: \"3 fortnights\" "
        )),
        "{run}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    for (text, says) in [
        ("[profiles.x]\nkey = 1\n", "line 2: invalid type"),
        (
            "[profiles.x]\nkey = \"k\"\nin_flight.predicate = \"k = 1 OR pg_sleep(10) IS NULL\"\n",
            "profiles.x.in_flight.predicate: expected IS, IN or a comparison",
        ),
        ("verbose = true\n", "line 1: unknown field `verbose`"),
        ("table = \"a.b.c\"\n", "table: expected [SCHEMA.]NAME"),
        // A state both in flight and done would let evict delete keys in flight.
        (
            "[profiles.x]\nkey = \"k\"\nin_flight = { column = \"phase\", values = [\"running\"], done = [\"running\", \"ok\"] }\n",
            "profiles.x.in_flight: state \"running\" is listed both in values (in flight) and in done",
        ),
        (
            "[profiles.x]\nkey = \"k\"\nin_flight = { column = \"phase\", values = [\"running\"] }\n",
            "profiles.x.in_flight.done: a state column needs done = [...]",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let run = m.idemctl().arg("stats").run();
        run.assert_code(2)
            .assert_stderr_contains(&format!("config file {config}: {says}"));
        assert_eq!(run.stderr.lines().count(), 1, "{run}");
    }
    m.db.idemctl()
        .args(["--config", "/nonexistent/idemctl.toml", "stats"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("cannot read config file /nonexistent/idemctl.toml: ");
}

/// A request body in two spellings, and its canonical forms written out by hand (independently of
/// idemctl): JCS (members sorted, no whitespace) and Python's `json.dumps(sort_keys=True)`.
const SENT: &str = "{\"to\": \"acct_9\", \"amount\": 1250, \"note\": \"caf\u{e9}\"}";
const SENT_RESPACED: &str = "{ \"note\":\"caf\u{e9}\",\n  \"amount\":1250, \"to\":\"acct_9\" }";
const SENT_JCS: &str = "{\"amount\":1250,\"note\":\"caf\u{e9}\",\"to\":\"acct_9\"}";
const SENT_SORTED_KEYS: &str = "{\"amount\": 1250, \"note\": \"caf\\u00e9\", \"to\": \"acct_9\"}";

/// Store `canonical`'s sha256 as the fingerprint of key `id` of account 7, computed by the server,
/// in the column's own form (a raw digest in bytea, lowercase hex in text).
async fn insert_fingerprinted(m: &Mapped, id: &str, canonical: &str) {
    let digest = if scalar_i64(
        &m.db,
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_name = 'request_log' AND column_name = 'body_sha256' AND data_type = 'bytea'",
    )
    .await
        == 1
    {
        "sha256(convert_to($2, 'UTF8'))"
    } else {
        "encode(sha256(convert_to($2, 'UTF8')), 'hex')"
    };
    m.db.client()
        .await
        .execute(
            &format!(
                "INSERT INTO request_log (account, request_id, body_sha256, verb, route, http_status, reply) \
                 VALUES (7, $1, {digest}, 'POST', '/v1/transfers', 201, '{{}}')"
            ),
            &[&id, &canonical],
        )
        .await
        .unwrap();
}

/// `inspect --body` on the mapped table: the body matches however it is spelled, a changed body
/// does not (exit 4), and the canonical form follows the mapped column's type.
async fn assert_body_checks(m: &Mapped, canonical: &str, column_type: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sent = dir.path().join("sent.json");
    std::fs::write(&sent, SENT_RESPACED).unwrap();
    let inspect = |tenant: &str, json: bool| {
        let out: &[&str] = if json { &["-o", "json"] } else { &[] };
        m.idemctl()
            .args(out)
            .args(["inspect", "paid", "--api-key-id", tenant, "--body"])
            .arg(&sent)
    };
    let run = inspect("7", true)
        .args(["--method", "POST", "--path", "/v1/transfers"])
        .run();
    run.assert_success();
    let json = run.json();
    assert_eq!(json["canonical"], canonical, "{run}");
    assert_eq!(json["fingerprint_matches"], true, "{run}");
    assert_eq!(json["matches"], true, "{run}");
    inspect("7", false)
        .run()
        .assert_success()
        .assert_stdout_contains("fingerprint  match\n")
        .assert_stdout_contains(&format!("(body_sha256, {column_type})"));
    std::fs::write(&sent, SENT.replace("1250", "1251")).unwrap();
    let run = inspect("7", true).run();
    run.assert_code(4);
    assert_eq!(run.json()["fingerprint_matches"], false, "{run}");
    // Another tenant's key of the same name is not this one.
    inspect("8", false).run().assert_code(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_body_checks_a_request_against_a_mapped_hex_fingerprint() {
    let m = Mapped::new(1, &generic_config()).await;
    insert_fingerprinted(&m, "paid", SENT_SORTED_KEYS).await;
    assert_body_checks(&m, "sorted-keys", "text").await;
}

/// The same mapping on a table whose fingerprint column holds the raw digest: the catalog says it
/// is bytea, inspect shows it as hex and checks bodies with JCS, and the other commands run on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapping_with_a_bytea_fingerprint() {
    let m = Mapped::new(3, &generic_config()).await;
    m.db.exec(
        "ALTER TABLE request_log ALTER COLUMN body_sha256 TYPE bytea USING decode(body_sha256, 'hex')",
    )
    .await;
    insert_fingerprinted(&m, "paid", SENT_JCS).await;
    let run = m
        .idemctl()
        .args(["-o", "json", "inspect", "stuck-2", "--api-key-id", "3"])
        .run();
    run.assert_success();
    let stored = scalar_text(
        &m.db,
        "SELECT encode(body_sha256, 'hex') FROM request_log WHERE request_id = 'stuck-2'",
    )
    .await;
    assert_eq!(run.json()["request_fingerprint"], stored.as_str(), "{run}");
    assert_body_checks(&m, "jcs", "bytea").await;
    // check finds the mapped columns as they are; evict and reclaim work through the mapping.
    let run = m.idemctl().args(["-o", "json", "check"]).run();
    assert_eq!(finding(&run.json(), "columns")["status"], "ok", "{run}");
    m.idemctl().args(["-q", "evict"]).run().assert_success();
    assert_eq!(m.count("done-old").await, 0);
    m.reclaim_with_fail();
    assert_eq!(m.failed_stuck().await, 6);
}

/// Without the indexes, check advises the ones the mapping needs, on its own columns; each advised
/// statement, run as printed, is the index check then finds, and check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_advises_the_indexes_a_mapping_needs_and_accepts_them() {
    let m = Mapped::with(2, &generic_config(), None).await;
    let run = m.idemctl().args(["-o", "json", "check"]).run();
    let json = run.json();
    // evict walks the primary key meanwhile: the missing index is a warning, with its fix.
    let expiry = finding(&json, "expiry index");
    assert_eq!(expiry["status"], "warn", "{run}");
    assert_eq!(
        expiry["fix"],
        "CREATE INDEX CONCURRENTLY \"request_log_expiry\" ON \"public\".\"request_log\" (valid_until);",
        "{run}"
    );
    let in_flight = finding(&json, "in_progress index");
    assert_eq!(in_flight["status"], "note", "{run}");
    let in_flight_fix = in_flight["fix"].as_str().unwrap().to_owned();
    assert_eq!(
        in_flight_fix,
        "CREATE INDEX CONCURRENTLY \"request_log_in_progress\" ON \"public\".\"request_log\" \
         ((coalesce(claimed_at, inserted_at))) WHERE ((http_status IS NULL) AND (claimed_at IS NOT NULL));",
        "{run}"
    );
    assert!(!run.stdout.contains("ALTER TABLE"), "{run}");
    // Without the in-flight index reclaim refuses to scan; with the advised one it runs.
    m.idemctl()
        .args(["reclaim", "--dry-run", "--action", "release"])
        .run()
        .assert_code(2)
        .assert_stderr_contains("--allow-scan");
    for fix in [expiry["fix"].as_str().unwrap(), &in_flight_fix] {
        m.db.exec(fix).await;
    }
    m.db.exec("ANALYZE request_log").await;
    let run = m.idemctl().args(["-o", "json", "check"]).run();
    run.assert_success();
    let json = run.json();
    assert_eq!(finding(&json, "expiry index")["status"], "ok", "{run}");
    assert_eq!(finding(&json, "in_progress index")["status"], "ok", "{run}");
    m.idemctl()
        .args(["-q", "reclaim", "--dry-run", "--action", "release"])
        .run()
        .assert_success();

    // A mapping without an expiry column: the advice is an index on its created_at column.
    let db = TestDb::new().await;
    db.exec(JOBS_DDL).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, JOBS_CONFIG).unwrap();
    let run = db
        .idemctl()
        .args(["--config", path.to_str().unwrap(), "-o", "json", "check"])
        .run();
    let json = run.json();
    let fix = finding(&json, "expiry index")["fix"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        fix.ends_with(" ON \"public\".\"jobs_keys\" (born);"),
        "{run}"
    );
    let fix_in_flight = finding(&json, "in_progress index")["fix"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fix_in_flight.contains("WHERE"), "{run}");
    db.exec(&fix).await;
    db.exec(&fix_in_flight).await;
    let run = db
        .idemctl()
        .args(["--config", path.to_str().unwrap(), "-o", "json", "check"])
        .run();
    let json = run.json();
    assert_eq!(finding(&json, "expiry index")["status"], "ok", "{run}");
    assert_eq!(finding(&json, "in_progress index")["status"], "ok", "{run}");
}

/// Names reach messages as they are written, with terminal controls escaped once, where the line
/// is printed: an unknown profile's name, the config file's path in an error line, and the same
/// path in check's report (exact in JSON; in text a control character shown as its escape).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_in_messages_are_escaped_once_where_they_are_printed() {
    let m = Mapped::new(1, &generic_config()).await;
    let run =
        m.db.idemctl()
            .args(["-t", "request_log", "--profile", "no\u{1b}[2Jsuch", "stats"])
            .run();
    run.assert_code(2).assert_stderr_contains(
        "unknown profile no\\x1b[2Jsuch (named by --profile): expected one of",
    );
    assert!(!run.stderr.contains('\u{1b}'), "{run}");
    let odd = m.dir.path().join("odd\u{1b}]0;x\u{7}\\.toml");
    std::fs::write(&odd, "ttl = \"3 fortnights\"\n").unwrap();
    let run = m.db.idemctl().arg("--config").arg(&odd).arg("stats").run();
    run.assert_code(2)
        .assert_stderr_contains("odd\\x1b]0;x\\x07\\.toml: ttl: ");
    assert!(
        !run.stderr.contains('\u{1b}') && !run.stderr.contains('\u{7}'),
        "{run}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run}");
    std::fs::write(&odd, generic_config()).unwrap();
    let run =
        m.db.idemctl()
            .arg("--config")
            .arg(&odd)
            .args(["-o", "json", "check"])
            .run();
    run.assert_success();
    // JSON carries the path exactly; the text report escapes its controls where it prints it.
    let detail = finding(&run.json(), "profile")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.ends_with("odd\u{1b}]0;x\u{7}\\.toml, [profiles.ledger]"),
        "{detail}"
    );
    let run = m.db.idemctl().arg("--config").arg(&odd).arg("check").run();
    run.assert_success();
    assert!(run.stdout.contains("odd\\x1b]0;x\\x07\\.toml"), "{run}");
    assert!(
        !run.stdout.contains('\u{1b}') && !run.stdout.contains('\u{7}'),
        "{run}"
    );
}

/// A table whose column names need quoting (camelCase, upper case), as ORMs create it.
pub(crate) const QUOTED_DDL: &str = "CREATE TABLE \"IdempotencyKey\" (\"id\" text PRIMARY KEY, \"userId\" text NOT NULL, \
     \"Status\" text NOT NULL, \"responseCode\" int, \"responseBody\" jsonb, \"lockedAt\" timestamptz, \
     \"createdAt\" timestamptz NOT NULL DEFAULT now(), \"expiresAt\" timestamptz NOT NULL); \
     CREATE UNIQUE INDEX ON \"IdempotencyKey\" (\"userId\", \"id\"); \
     CREATE INDEX \"IdempotencyKey_expiresAt_idx\" ON \"IdempotencyKey\" (\"expiresAt\");";

pub(crate) const QUOTED_CONFIG: &str = r#"table = "IdempotencyKey"
[profiles.prisma]
key = "id"
tenant = "userId"
created_at = "createdAt"
expires_at = "expiresAt"
locked_at = "lockedAt"
response_status = "responseCode"
response_body = "responseBody"
in_flight = { column = "Status", values = ["IN_PROGRESS"], done = ["COMPLETED", "FAILED"] }
actions = ["fail", "delete"]
"#;

/// Rows of `IdempotencyKey`: `n` expired completed keys (`old-*`), `n` live ones (`new-*`) and
/// `busy` expired keys still in progress (`busy-*`), users u1..u3, a second apart.
pub(crate) fn quoted_rows(n: i64, busy: i64) -> String {
    let row = |kind: &str, n: i64, status: &str, expires: &str| {
        format!(
            "INSERT INTO \"IdempotencyKey\" (\"id\", \"userId\", \"Status\", \"responseCode\", \"responseBody\", \"lockedAt\", \"createdAt\", \"expiresAt\") \
             SELECT '{kind}-' || g, 'u' || (1 + g % 3), '{status}', 200, '{{}}', now() - interval '3 days' - g * interval '1 second', \
             now() - interval '3 days' - g * interval '1 second', {expires} FROM generate_series(1, {n}) AS g;"
        )
    };
    [
        row(
            "old",
            n,
            "COMPLETED",
            "now() - interval '1 day' - g * interval '1 second'",
        ),
        row(
            "new",
            n,
            "COMPLETED",
            "now() + interval '1 hour' + g * interval '1 second'",
        ),
        row(
            "busy",
            busy,
            "IN_PROGRESS",
            "now() - interval '1 day' - g * interval '1 second'",
        ),
    ]
    .concat()
}

/// Column names that need quoting are matched against the catalog's indexes by attribute, not by
/// the text PostgreSQL prints: the expiry and identity indexes are recognised and every command
/// runs; eviction keeps keys in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapping_of_columns_whose_names_need_quoting() {
    let db = loaded(QUOTED_DDL, &quoted_rows(6, 6), None).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, QUOTED_CONFIG).unwrap();
    let path = path.to_string_lossy().into_owned();
    let idemctl = || db.idemctl().args(["--config", &path]);
    let run = idemctl().args(["-o", "json", "check"]).run();
    let json = run.json();
    assert_eq!(finding(&json, "expiry index")["status"], "ok", "{run}");
    assert_eq!(finding(&json, "identity index")["status"], "ok", "{run}");
    let run = idemctl().args(["evict", "--dry-run"]).run();
    run.assert_success();
    let run = idemctl().args(["-o", "json", "stats"]).run();
    run.assert_success();
    assert_eq!(run.json()["expired_backlog"]["count"], 6, "{run}");
    let run = idemctl()
        .args(["-o", "json", "inspect", "old-1", "--api-key-id", "u2"])
        .run();
    run.assert_success();
    assert_eq!(run.json()["key"], "old-1", "{run}");
    // The state column's values are read as the mapping defines them, as evict and reclaim do.
    assert_eq!(run.json()["state"], "completed", "{run}");
    let run = idemctl()
        .args(["inspect", "busy-1", "--api-key-id", "u2"])
        .run();
    run.assert_success()
        .assert_stdout_contains("in_progress for ")
        .assert_stdout_contains("reclaim would take it");
    idemctl().args(["-q", "evict"]).run().assert_success();
    let left = |prefix: &'static str| {
        let db = &db;
        async move {
            scalar_i64(
                db,
                &format!("SELECT count(*) FROM \"IdempotencyKey\" WHERE \"id\" LIKE '{prefix}-%'"),
            )
            .await
        }
    };
    assert_eq!(left("old").await, 0);
    assert_eq!(left("new").await, 6);
    assert_eq!(left("busy").await, 6);

    // A primary key on an upper-case column, and an expiry column with a space in its name.
    db.exec(
        "CREATE TABLE \"Weird Keys\" (\"Key\" text PRIMARY KEY, born timestamptz NOT NULL, \
         \"valid until\" timestamptz NOT NULL, phase text NOT NULL); \
         CREATE INDEX ON \"Weird Keys\" (\"valid until\"); \
         INSERT INTO \"Weird Keys\" SELECT 'k' || g, now() - interval '2 days', \
         now() - interval '1 day', 'ok' FROM generate_series(1, 5) g;",
    )
    .await;
    std::fs::write(
        &path,
        "table = \"Weird Keys\"\n[profiles.weird]\nkey = \"Key\"\ncreated_at = \"born\"\n\
         expires_at = \"valid until\"\nin_flight = { column = \"phase\", values = [\"running\"], done = [\"ok\"] }\n",
    )
    .unwrap();
    let run = idemctl().args(["-o", "json", "check"]).run();
    let json = run.json();
    assert_eq!(finding(&json, "expiry index")["status"], "ok", "{run}");
    assert_eq!(finding(&json, "identity index")["status"], "ok", "{run}");
    idemctl().args(["-q", "evict"]).run().assert_success();
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM \"Weird Keys\"").await,
        0
    );
}

/// A mapping without a fingerprint column: inspect --body has nothing to compare, and says so
/// before reading any key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_body_on_a_mapping_without_a_fingerprint_is_refused_in_exact_words() {
    let config = generic_config().replace("fingerprint = \"body_sha256\"\n", "");
    assert!(!config.contains("fingerprint ="), "{config}");
    let m = Mapped::new(1, &config).await;
    let sent = m.dir.path().join("sent.json");
    std::fs::write(&sent, "{}").unwrap();
    m.idemctl()
        .args(["inspect", "paid", "--api-key-id", "7", "--body"])
        .arg(&sent)
        .run()
        .assert_error(
            2,
            "table public.request_log stores no request fingerprint (profile ledger), so --body cannot be checked",
        );
}
