//! The config file's and its mappings' refusals, each provoked by a file the test writes and
//! asserted whole: the one stderr line and its exit code. The file's own mistakes are refused
//! before connecting; what only the table can show (a column's type, a zone its times lack) is
//! refused by a real server before any change.

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, TestDb};

/// A conninfo nothing listens on: a refusal seen with it was made before connecting.
const NOWHERE: &str = "host=/nonexistent/idemctl-test port=1 dbname=none connect_timeout=1";

/// The start of a mapping every case below completes.
const MAPPING: &str = "[profiles.billing]\nkey = \"request_id\"\n";

/// The words a predicate refusal ends with.
const PREDICATE_FORMS: &str = "write column IS [NOT] NULL, column = 'text' or 42, column [NOT] IN ('a', 'b'), joined by AND, OR, NOT and parentheses";

/// Each case: a file's text, and the refusal after `config file <file>: `.
const REFUSED_FILES: &[(&str, &str)] = &[
    (
        "database_url = \"host=/tmp\"\nservice = \"app\"\n",
        "service: database_url and service are both set; keep one",
    ),
    (
        "service = \"my app\"\n",
        "service: expected the name of a section of the service file, without blanks or quotes",
    ),
    (
        "service = \"\"\n",
        "service: expected the name of a section of the service file, without blanks or quotes",
    ),
    (
        "profile = \"ledger\"\n",
        "profile: no profile ledger: expected storage, explainer, rocket-rides or a [profiles.NAME] section of the file",
    ),
    (
        "[profiles.billing]\nkey = \"\"\n",
        "profiles.billing.key: expected a column name (1 to 63 bytes, no control characters), as the catalog spells it",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nlocked_at = \"a_name_that_is_sixty_four_bytes_long_which_the_catalog_cannot_xy\"\n",
        "profiles.billing.locked_at: expected a column name (1 to 63 bytes, no control characters), as the catalog spells it",
    ),
    (
        "[profiles.billing]\nkey = \"request\\nid\"\n",
        "profiles.billing.key: expected a column name (1 to 63 bytes, no control characters), as the catalog spells it",
    ),
    (
        "[profiles.storage]\nkey = \"request_id\"\n",
        "profiles.storage: a mapping's name is letters, digits, - and _, and not a built-in profile (storage, explainer, rocket-rides)",
    ),
    (
        "[profiles.\"bill ing\"]\nkey = \"request_id\"\n",
        "profiles.bill ing: a mapping's name is letters, digits, - and _, and not a built-in profile (storage, explainer, rocket-rides)",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight = { column = \"state\", done = [\"done\"] }\n",
        "profiles.billing.in_flight.values: a state column needs values = [...], the states that mean in flight",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight = { column = \"state\", values = [], done = [\"done\"] }\n",
        "profiles.billing.in_flight.values: a state column needs values = [...], the states that mean in flight",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight = { column = \"state\", values = [\"running\"] }\n",
        "profiles.billing.in_flight.done: a state column needs done = [...], the states that mean finished (evict removes expired keys in them)",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight = { values = [\"running\"], done = [\"done\"] }\n",
        "profiles.billing.in_flight: give predicate = \"...\", or column = \"...\" with values = [...] (in flight) and done = [...] (finished)",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight = { predicate = \"done_at IS NULL\", column = \"state\" }\n",
        "profiles.billing.in_flight: give either predicate = \"...\" or column = \"...\" with values and done, not both",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight.predicate = \"done_at IS NULL\"\nactions = [\"delete\", \"delete\"]\n",
        "profiles.billing.actions: an action is listed twice",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nactions = [\"delete\"]\n",
        "profiles.billing.actions: reclaim acts on keys stuck in flight, and the mapping has no in_flight marker (no key is ever in flight): drop actions, or map in_flight",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nresponse_status = \"status\"\nin_flight.predicate = \"status IS NULL\"\nactions = [\"fail\"]\n",
        "profiles.billing.actions: fail stores an error response: map response_status and response_body, or drop fail",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight.predicate = \"done_at IS NULL\"\nactions = [\"release\"]\n",
        "profiles.billing.actions: release clears the lock time: map locked_at, or drop release",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nlocked_at = \"locked\"\nin_flight.predicate = \"done_at IS NULL\"\nactions = [\"delete\", \"release\"]\n",
        "profiles.billing.actions: release clears locked_at, which must end the key's in-flight state: use an in-flight predicate that reads locked_at (e.g. ... AND locked_at IS NOT NULL), or drop release",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\ntenant = 5\n",
        "line 3: tenant is a column name or a list of column names; docs/profiles.md lists the keys",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\ntenant = [\"account\", 5]\n",
        "line 3: tenant is a column name or a list of column names; docs/profiles.md lists the keys",
    ),
    (
        "[profiles.billing]\nkey = \"request_id\"\nin_flight.predicate = \"done_at IS NULL\"\nactions = [\"explode\"]\n",
        "line 4: unknown variant `explode`, expected one of `delete`, `fail`, `release`; docs/profiles.md lists the keys",
    ),
];

/// Each case: an in-flight predicate, and the parser's words for it.
const REFUSED_PREDICATES: &[(&str, &str)] = &[
    ("= 'x'", "expected a column name, found `=`"),
    (
        "done_at IS NULL AND",
        "expected a column name, found the end",
    ),
    (
        "done_at IS NULL OR 'x'",
        "expected a column name, found 'x'",
    ),
    (
        "done_at IS 5",
        "expected NULL, TRUE or FALSE after IS, found `5`",
    ),
    (
        "done_at IS NOT",
        "expected NULL, TRUE or FALSE after IS, found the end",
    ),
    (
        "phase IN ('a' 'b')",
        "expected `,` or `)` in the IN list, found 'b'",
    ),
    (
        "phase IN ('a'",
        "expected `,` or `)` in the IN list, found the end",
    ),
];

#[test]
fn a_config_file_and_its_mappings_are_refused_before_connecting_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idemctl.toml");
    let shown = file.display().to_string();
    let run = |text: &str| {
        std::fs::write(&file, text).unwrap();
        Cmd::new()
            .env("IDEMCTL_DATABASE_URL", NOWHERE)
            .arg("--config")
            .arg(&file)
            .arg("stats")
            .run()
    };
    for (text, refusal) in REFUSED_FILES {
        println!("--- file:\n{text}");
        run(text).assert_error(2, &format!("config file {shown}: {refusal}"));
    }
    for (predicate, error) in REFUSED_PREDICATES {
        let text = format!(
            "{MAPPING}in_flight.predicate = {}\n",
            toml_string(predicate)
        );
        run(&text).assert_error(
            2,
            &format!(
                "config file {shown}: profiles.billing.in_flight.predicate: {error}; {PREDICATE_FORMS}"
            ),
        );
    }
}

/// A file that cannot be read, named by --config or by IDEMCTL_CONFIG.
#[test]
fn a_config_file_that_cannot_be_read_is_refused_in_exact_words() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let expected = format!(
        "cannot read config file {}: No such file or directory (os error 2); check --config (or IDEMCTL_CONFIG)",
        missing.display()
    );
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", NOWHERE)
        .arg("--config")
        .arg(&missing)
        .arg("stats")
        .run()
        .assert_error(2, &expected);
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", NOWHERE)
        .env("IDEMCTL_CONFIG", &missing)
        .arg("stats")
        .run()
        .assert_error(2, &expected);
    let directory = dir.path().display().to_string();
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", NOWHERE)
        .arg("--config")
        .arg(dir.path())
        .arg("stats")
        .run()
        .assert_error(
            2,
            &format!("cannot read config file {directory}: Is a directory (os error 21); check --config (or IDEMCTL_CONFIG)"),
        );
}

/// A TOML basic string holding `text`.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Tables whose columns a profile cannot read: a built-in profile's column of another type, and a
/// mapping's times without a zone.
const REFUSED_TABLES: &str = "\
    CREATE TABLE typed (LIKE idempotency_keys INCLUDING ALL); \
    ALTER TABLE typed ALTER expires_at TYPE text; \
    CREATE TABLE naive_jobs (tok text PRIMARY KEY, born timestamp NOT NULL, \
        done_at timestamp)";

const NAIVE_MAPPING: &str =
    "[profiles.jobs]\nkey = \"tok\"\ncreated_at = \"born\"\nexpires_at = \"done_at\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_only_the_table_shows_is_refused_before_any_change_in_exact_words() {
    let db = TestDb::new().await;
    let mix = Mix {
        expired: 3,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    db.exec(REFUSED_TABLES).await;
    let before = fixtures::snapshot(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemctl.toml");
    std::fs::write(&config, NAIVE_MAPPING).unwrap();
    let shown = config.display().to_string();

    db.idemctl()
        .args(["-t", "typed", "--profile", "storage", "evict"])
        .run()
        .assert_error(2, "table public.typed column expires_at is text, expected timestamp with time zone or timestamp without time zone, which profile storage needs; pick another with --profile, or map the table's columns in a config file with --config (see docs/profiles.md)");
    db.idemctl()
        .args(["-t", "naive_jobs", "--config"])
        .arg(&config)
        .args(["evict"])
        .run()
        .assert_error(2, &format!("table public.naive_jobs: column born, column done_at is timestamp without time zone, which holds no zone: declare the zone the application writes it in with time_zone = \"UTC\" in the mapping (config file {shown}, [profiles.jobs]), --time-zone or IDEMCTL_TIME_ZONE (any IANA name, e.g. UTC); nothing was changed"));
    assert_eq!(fixtures::snapshot(&db).await, before);
}

/// The coordinator's metadata placing a shard on a port no TCP port can be (pg_dist_node edited by
/// hand): the run stops before reaching any worker, naming the node and the fix, with nothing
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_citus_node_on_an_impossible_port_is_refused_in_exact_words() {
    use crate::citus::{MIX, loaded_with, snapshot};
    use crate::support::citus::Layout;
    let Some(db) = loaded_with(Layout::ByTenant, MIX, "citus metadata port").await else {
        return;
    };
    let before = snapshot(&db).await;
    let client = db.client().await;
    let worker = client
        .query_one(
            "SELECT nodeid, nodename::text, nodeport FROM pg_dist_node \
              WHERE groupid > 0 ORDER BY nodeid LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (id, node, port): (i32, String, i32) = (worker.get(0), worker.get(1), worker.get(2));
    let set_port = |port: i32| {
        let client = &client;
        async move {
            client
                .execute(
                    "UPDATE pg_dist_node SET nodeport = $2 WHERE nodeid = $1",
                    &[&id, &port],
                )
                .await
                .unwrap();
        }
    };
    set_port(70_000).await;
    db.idemctl()
        .args(["evict", "-o", "json"])
        .run()
        .assert_error(1, &format!("failed to reach the key table's shards on the Citus workers: the Citus metadata places shards on node {node} port 70000, which is not a TCP port (1 to 65535); correct the node's entry in pg_dist_node with citus_update_node"));
    set_port(port).await;
    assert_eq!(snapshot(&db).await, before);
}

/// A plan row edited to hold a NULL scope on a table whose scope column is NOT NULL names no row
/// the table can hold: --apply refuses the plan before any change, as a row made for another table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_row_with_a_null_scope_the_table_cannot_hold_is_refused_in_exact_words() {
    let db = TestDb::new().await;
    let mix = Mix {
        stuck: 4,
        ..Mix::default()
    };
    fixtures::table_with(&db, Schema::Corrected, mix).await;
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    db.idemctl()
        .args(["reclaim", "--allow-scan", "--plan"])
        .arg(&plan)
        .run()
        .assert_success();
    let mut written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let row = &mut written["rows"][0];
    let key = row["key"].as_str().unwrap().to_owned();
    row["scope"] = serde_json::json!([null]);
    row["api_key_id"] = serde_json::Value::Null;
    std::fs::write(&plan, written.to_string()).unwrap();
    let before = fixtures::snapshot(&db).await;
    db.idemctl()
        .args(["reclaim", "--yes", "--allow-scan", "--apply"])
        .arg(&plan)
        .run()
        .assert_error(2, &format!("plan {} is not a valid reclaim plan (the row of key {key} has no api_key_id, but table public.idempotency_keys has a tenant column (api_key_id)); nothing was changed, make a new one with --plan", plan.display()));
    assert_eq!(fixtures::snapshot(&db).await, before);
}
