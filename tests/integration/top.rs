//! `idemctl top`: the live view driven in a real terminal (tmux, 80x24) against a live workload,
//! read off the screen, and quit every documented way, each leaving the terminal as it was; a
//! terminal that goes away under it; off a terminal, the refusal and `--once`; and the figures
//! against `stats -o json`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, IDEMCTL, TestDb};

const REFUSAL: &str = "idemctl: top draws a live view and stdout is not a terminal; for figures a script can read, run `idemctl stats -o json` (or `idemctl top --once` for one frame as text)\n";

/// A tmux server of its own (its own socket, no configuration file) with one 80x24 window; also
/// the terminal other commands' questions are answered on.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    /// Start `script` (a shell script) in a new 80x24 window.
    pub(crate) fn start(script: &Path) -> Tmux {
        let installed = Command::new("tmux").arg("-V").output();
        assert!(
            installed.is_ok_and(|o| o.status.success()),
            "tmux is needed to drive idemctl top in a real terminal: apt-get install tmux"
        );
        let tmux = Tmux {
            socket: format!("idemctl-top-{}", crate::support::pg::random_hex()),
        };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            "top",
            &format!("sh {}", script.display()),
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Cmd::of("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env("TERM", "xterm-256color")
            .run();
        out.assert_code(0);
        out.stdout
    }

    /// What the window shows now.
    pub(crate) fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// What the window shows now, each line wrapped at its edge joined again and its trailing
    /// blanks cut: the lines as the program wrote them.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-J", "-t", "top"])
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect()
    }

    pub(crate) fn keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "top", keys]);
    }

    /// Whether the window is on the alternate screen.
    fn alternate(&self) -> bool {
        self.run(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim()
            == "1"
    }

    /// The process the window runs (the shell of the script).
    fn pane_pid(&self) -> u32 {
        self.run(&["display", "-p", "-t", "top", "#{pane_pid}"])
            .trim()
            .parse()
            .unwrap()
    }

    /// Wait until the screen satisfies `ok` (at most `limit`), returning it; panic with the
    /// screen and `what` otherwise.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(
                started.elapsed() < limit,
                "the screen did not show {what} within {limit:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// A script that runs `idemctl top` with `args` in the window, then prints its exit status and
/// the terminal's settings, and stays so that the screen can be read.
fn top_script(dir: &Path, db: &TestDb, args: &str) -> std::path::PathBuf {
    let path = dir.join("top.sh");
    std::fs::write(
        &path,
        format!(
            "'{IDEMCTL}' -d '{}' top {args}\necho \"EXIT=$?\"\nstty -a | tr '\\n' ' '\necho\nsleep 600\n",
            db.url()
        ),
    )
    .unwrap();
    path
}

/// The window after top ended: its exit status is `code`, the alternate screen is left, and the
/// terminal is back in canonical mode with echo on.
fn assert_restored(tmux: &Tmux, code: i32) {
    let screen = tmux.wait_for("top's exit status", Duration::from_secs(20), |s| {
        s.contains("EXIT=") && s.contains("speed")
    });
    assert!(screen.contains(&format!("EXIT={code}\n")), "{screen}");
    assert!(
        !tmux.alternate(),
        "still on the alternate screen:\n{screen}"
    );
    let settings: String = screen
        .lines()
        .skip_while(|l| !l.starts_with("EXIT="))
        .skip(1)
        .collect::<Vec<_>>()
        .join("");
    let words: Vec<&str> = settings
        .split(|c: char| c.is_whitespace() || c == ';')
        .collect();
    for on in ["icanon", "echo", "isig"] {
        assert!(words.contains(&on), "{on} is not back on: {settings}");
        assert!(!words.contains(&format!("-{on}").as_str()), "{settings}");
    }
    // Nothing of the view is left on the main screen.
    assert!(!screen.contains("evicted ÷ inserted"), "{screen}");
}

/// The value drawn beside `label` in the eviction box (the columns after the label's).
fn figure(screen: &str, label: &str) -> String {
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("│{label} ")))
        .unwrap_or_else(|| panic!("no {label} line:\n{screen}"));
    let value: String = line.chars().skip(20).take(21).collect();
    value.trim().to_owned()
}

/// A rate as drawn (`12.5 rows/s`, `1,234 rows/s`), or None while it is being measured.
fn rate(screen: &str, label: &str) -> Option<f64> {
    let text = figure(screen, label);
    text.strip_suffix(" rows/s")
        .map(|n| n.replace(',', "").parse().unwrap())
}

async fn table(expired: i64) -> TestDb {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired,
            live: 200,
            fresh: 5,
            stuck: 3,
            expired_in_progress: 0,
        },
    )
    .await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec("ANALYZE idempotency_keys").await;
    db
}

/// Expired completed keys, 5 every 100 ms: the backlog grows while nothing evicts.
const EXPIRED_INSERTS: &str = "INSERT INTO idempotency_keys (key, api_key_id, request_method, \
     request_path, request_fingerprint, state, response_status, response_body, created_at, expires_at) \
     SELECT gen_random_uuid()::text, 'tenant-live', 'POST', '/v1/charges', '\\x00', 'completed', 201, \
     '{}', now() - interval '2 minutes', now() - interval '1 minute' FROM generate_series(1, 5)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_in_a_terminal_follows_inserts_and_evict_and_q_restores_the_terminal() {
    let db = table(300).await;
    let (stop, inserting) =
        crate::support::inserts::insert_steadily(db.client().await, EXPIRED_INSERTS, 5);
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    let limit = Duration::from_secs(30);
    // The inserts show as a rate, and the backlog grows from one refresh to a later one.
    let first = tmux.wait_for("an insert rate", limit, |s| {
        s.contains("live") && rate(s, "inserted").is_some_and(|r| r > 0.0)
    });
    assert!(tmux.alternate(), "top draws on the alternate screen");
    assert!(first.lines().count() <= 24, "{first}");
    assert!(
        first.contains("idemctl top · public.idempotency_keys"),
        "{first}"
    );
    let backlog = figure(&first, "backlog");
    tmux.wait_for("the backlog move", limit, |s| {
        figure(s, "backlog") != backlog
    });
    // evict, held to a slow rate so that it runs a while, shows as an eviction rate and as the
    // idemctl session holding evict's lock.
    let evict = db
        .idemctl()
        .args(["evict", "--max-rate", "200", "--max-runtime", "40s"])
        .timeout(Duration::from_secs(90))
        .spawn();
    let screen = tmux.wait_for("evict running and its rate", limit, |s| {
        s.contains(" evict: ") && rate(s, "evicted").is_some_and(|r| r > 0.0)
    });
    assert!(
        screen.contains("evicted ÷ inserted"),
        "the ratio's line: {screen}"
    );
    tmux.keys("q");
    assert_restored(&tmux, 0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(inserting.await.unwrap() > 0.0);
    evict.signal("TERM");
    let _ = evict.wait_async().await;
}

/// The columns of the trend drawn beside `label` in the eviction box.
fn trend(screen: &str, label: &str) -> String {
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("│{label} ")))
        .unwrap_or_else(|| panic!("no {label} line:\n{screen}"));
    line.chars().skip(41).take_while(|c| *c != '│').collect()
}

/// On a table without an index on its expiry column the lag is not measured at any refresh: its
/// trend stays empty (a gap for each refresh) while the insert rate's trend fills, instead of a
/// row of bars saying the lag is 0; the figure shows the planner's estimate, marked as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_lag_is_a_gap_in_the_trend_not_a_bar_at_zero() {
    let db = table(300).await;
    db.exec("DROP INDEX idempotency_keys_expiry; ANALYZE idempotency_keys")
        .await;
    let (stop, inserting) =
        crate::support::inserts::insert_steadily(db.client().await, EXPIRED_INSERTS, 5);
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 500ms"));
    let screen = tmux.wait_for(
        "five refreshes of the insert rate",
        Duration::from_secs(30),
        |s| s.contains("live") && trend(s, "inserted").trim().chars().count() >= 5,
    );
    // The planner's estimates stand beside them, said so.
    let lag = figure(&screen, "lag");
    assert!(
        lag.starts_with('~') && lag.ends_with(" (estimate)"),
        "{screen}"
    );
    assert_eq!(trend(&screen, "lag").trim(), "", "{screen}");
    let backlog = figure(&screen, "backlog");
    assert!(
        backlog.starts_with('~') && backlog.ends_with(" (estimate)"),
        "{screen}"
    );
    assert_eq!(trend(&screen, "backlog").trim(), "", "{screen}");
    tmux.keys("q");
    assert_restored(&tmux, 0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(inserting.await.unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_top_with_130_and_restores_the_terminal() {
    let db = table(50).await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    tmux.keys("C-c");
    assert_restored(&tmux, 130);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_restores_the_terminal_before_its_message_and_exits_70() {
    let db = table(10).await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    // The test binary is a debug build, which panics on F12: the panic hook must restore first.
    tmux.keys("F12");
    assert_restored(&tmux, 70);
    let screen = tmux.screen();
    assert!(
        screen.contains(
            "idemctl: internal error: F12 pressed in a debug build at src/output/top.rs:"
        ),
        "the panic's one line is printed on the restored screen:\n{screen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_top_with_143_and_restores_the_terminal() {
    let db = table(50).await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    let shell = tmux.pane_pid();
    let children = Cmd::of("ps")
        .args(["-o", "pid=", "--ppid", &shell.to_string()])
        .run();
    let top = children
        .stdout
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    Cmd::of("kill")
        .args(["-s", "TERM", &top])
        .run()
        .assert_code(0);
    assert_restored(&tmux, 143);
}

/// A connection that dies under the view shows as lost, and the next refresh connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_shows_in_the_view_and_is_retried() {
    let db = table(50).await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    let admin = db.client().await;
    let started = Instant::now();
    let lost = loop {
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                  WHERE application_name = 'idemctl' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap();
        let screen = tmux.screen();
        if screen.contains("CONNECTION LOST") {
            break screen;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no lost connection shown:\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(lost.contains("connection lost at "), "{lost}");
    assert!(lost.contains("retrying every 1s"), "{lost}");
    tmux.wait_for("the view live again", Duration::from_secs(30), |s| {
        s.contains(" live") && !s.contains("CONNECTION LOST")
    });
    tmux.keys("q");
    assert_restored(&tmux, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_a_terminal_top_refuses_in_one_line_pointing_to_stats_json() {
    let db = table(10).await;
    let run = db.idemctl().arg("top").run();
    run.assert_code(2).assert_stdout_empty();
    assert_eq!(run.stderr, REFUSAL);
    let run = db.idemctl().args(["top", "-o", "json"]).run();
    run.assert_code(2);
    assert_eq!(
        run.stderr,
        "idemctl: top's live view has no JSON form; add --once for one frame as JSON, or run `idemctl stats -o json`\n"
    );
    let run = db
        .idemctl()
        .args(["top", "--once", "--interval", "100ms"])
        .run();
    run.assert_code(2);
    assert_eq!(
        run.stderr,
        "idemctl: --interval must be at least 500ms: each refresh reads the table's figures again\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_prints_one_frame_as_plain_text_in_80_columns() {
    let db = table(41).await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, response_status, response_body, created_at, expires_at) \
         VALUES (E'evil\\x1b[2J', 'tenant_z', 'POST', '/p', '\\x00', 'completed', 201, '{}', \
         now() - interval '1 hour', now() + interval '1 minute')",
    )
    .await;
    let run = db
        .idemctl()
        .args(["top", "--once", "--interval", "500ms"])
        .run();
    run.assert_code(0).assert_stderr_empty();
    let text = &run.stdout;
    assert!(
        text.starts_with("idemctl top · public.idempotency_keys · every 500ms · "),
        "{text}"
    );
    assert!(text.lines().count() <= 24, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    assert!(
        !text.contains('\x1b'),
        "a key's escape reached the output: {text}"
    );
    assert!(text.contains("evil\\x1b[2J"), "the key, escaped: {text}");
    assert_eq!(figure(text, "backlog"), "41", "{text}");
    assert!(rate(text, "inserted").is_some(), "{text}");
    assert!(text.contains("stuck >5m     3"), "{text}");
    assert!(text.ends_with("ms\n"), "the refresh's time: {text}");
}

/// `top --once -o json` and `stats -o json` taken together on a table nothing changes say the
/// same, and the text view draws those figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_figures_agree_with_stats_json() {
    let db = table(734).await;
    let stats = db.idemctl().args(["stats", "-o", "json"]).run();
    stats.assert_code(0);
    let top = db
        .idemctl()
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run();
    top.assert_code(0);
    let (s, t) = (stats.json(), top.json());
    assert_eq!(t["table"], s["table"]);
    assert_eq!(t["backlog"], s["expired_backlog"], "{t}\n{s}");
    assert_eq!(t["backlog"]["count"], 734);
    assert_eq!(t["stuck"], s["stuck"]["count"]);
    assert_eq!(t["estimated_rows"], s["sizes"]["estimated_rows"]);
    assert_eq!(t["total_bytes"], s["sizes"]["total_bytes"]);
    assert_eq!(t["dead_tuples"], s["vacuum"]["dead_tuples"]);
    assert_eq!(t["oldest_live"]["key"], s["oldest_live"]["key"]);
    assert_eq!(t["oldest_expired"]["key"], s["oldest_expired"]["key"]);
    let lag = |j: &serde_json::Value| j["eviction_lag_seconds"].as_f64().unwrap();
    assert!(
        (lag(&t) - lag(&s)).abs() < 10.0,
        "lag {} vs {}",
        lag(&t),
        lag(&s)
    );
    assert_eq!(t["ttl"]["keys"], s["recent_ttl"]["keys"]);
    assert_eq!(t["ttl"]["p50_seconds"], s["recent_ttl"]["p50_seconds"]);
    let buckets: i64 = t["ttl"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[1].as_i64().unwrap())
        .sum();
    assert_eq!(serde_json::json!(buckets), s["recent_ttl"]["keys"]);
    // Nothing inserted or deleted between the two refreshes: both rates are 0.
    assert_eq!(t["insert_per_second"], 0.0, "{t}");
    assert_eq!(t["evict_per_second"], 0.0, "{t}");
    // The counters stats reads (top's rates are their changes).
    assert!(s["vacuum"]["inserted_rows"].as_i64().unwrap() >= 734, "{s}");
    let text = db
        .idemctl()
        .args(["top", "--once", "--interval", "500ms"])
        .run();
    text.assert_code(0);
    assert_eq!(figure(&text.stdout, "backlog"), "734", "{}", text.stdout);
    // Past top's cap of 1,000 (stats counts to 10,000): at least 1,000, with the estimate.
    db.exec(&format!(
        "{}; ANALYZE idempotency_keys",
        EXPIRED_INSERTS.replace("generate_series(1, 5)", "generate_series(1, 500)")
    ))
    .await;
    let stats = db.idemctl().args(["stats", "-o", "json"]).run();
    assert_eq!(stats.json()["expired_backlog"]["count"], 1234);
    let top = db
        .idemctl()
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run();
    let t = top.json();
    assert_eq!(t["backlog"]["count"], 1000, "{t}");
    assert_eq!(t["backlog"]["at_least"], true, "{t}");
    let estimate = t["backlog_estimate"].as_i64().unwrap();
    assert!((600..=2500).contains(&estimate), "{t}");
    let text = db
        .idemctl()
        .args(["top", "--once", "--interval", "500ms"])
        .run();
    assert!(
        figure(&text.stdout, "backlog").starts_with("≥1,000 (~"),
        "{}",
        text.stdout
    );
}

/// A request holding a key's row and another waiting for it: top names the waiting session, the
/// row and the session that holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_names_a_session_waiting_for_a_key_row_and_who_holds_it() {
    let db = table(10).await;
    let key = crate::support::stuck::stuck_key(&db, None, 0).await;
    let holder = crate::support::stuck::hold_row(&db, &key).await;
    holder
        .batch_execute("SET application_name = 'api-holder'")
        .await
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let waiter = db.client().await;
    waiter
        .batch_execute("SET application_name = 'api-waiter'")
        .await
        .unwrap();
    let waiter_pid: i32 = waiter
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (tenant, k) = key.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .execute(
                "UPDATE idempotency_keys SET locked_at = now() WHERE api_key_id = $1 AND key = $2",
                &[&tenant, &k],
            )
            .await
    });
    let top = db
        .idemctl()
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run_async()
        .await;
    top.assert_code(0);
    let waits = top.json()["row_waits"].clone();
    assert_eq!(waits.as_array().map(Vec::len), Some(1), "{waits}");
    assert_eq!(waits[0]["pid"], waiter_pid, "{waits}");
    assert_eq!(waits[0]["application_name"], "api-waiter", "{waits}");
    assert_eq!(waits[0]["holder_pid"], holder_pid, "{waits}");
    assert_eq!(waits[0]["holder_application_name"], "api-holder", "{waits}");
    assert_eq!(waits[0]["holder_state"], "idle in transaction", "{waits}");
    let text = db
        .idemctl()
        .args(["top", "--once", "--interval", "500ms"])
        .run_async()
        .await;
    text.assert_code(0);
    // The line wraps in 80 columns.
    let flat = text
        .stdout
        .lines()
        .map(|l| l.trim_matches('│').trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains(&format!("pid {waiter_pid} (api-waiter) waits "))
            && flat.contains(&format!(
                "held by pid {holder_pid} (api-holder, idle in transaction"
            )),
        "{}",
        text.stdout
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), 1);
}

/// Resumes a stopped server process when dropped, whatever the test did meanwhile.
struct Stopped(i32);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        Cmd::of("kill")
            .args(["-s", "STOP", &pid.to_string()])
            .run()
            .assert_code(0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-s", "CONT", &self.0.to_string()])
            .status();
    }
}

/// A server process that stops answering (as a silent network looks from the client) freezes
/// nothing: the refresh gives up at its deadline, the view says so, and the next refresh answers
/// on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_shows_as_lost_at_the_deadline_and_a_new_connection_takes_over() {
    let db = table(20).await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::start(&top_script(dir.path(), &db, "--interval 1s"));
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    let backend: i32 = db
        .client()
        .await
        .query_one(
            "SELECT pid FROM pg_stat_activity \
              WHERE application_name = 'idemctl' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let stopped = Stopped::stop(backend);
    let lost = tmux.wait_for("the lost connection", Duration::from_secs(30), |s| {
        s.contains("CONNECTION LOST")
    });
    assert!(
        lost.contains("no answer from the server within 5s"),
        "{lost}"
    );
    // Keys still work while the server is silent.
    tmux.keys("?");
    tmux.wait_for("the help", Duration::from_secs(30), |s| {
        s.contains("help · ? closes")
    });
    tmux.keys("?");
    let back = tmux.wait_for("the view live again", Duration::from_secs(30), |s| {
        s.contains(" live") && !s.contains("CONNECTION LOST")
    });
    assert!(back.contains("connection back at "), "{back}");
    drop(stopped);
    tmux.keys("q");
    assert_restored(&tmux, 0);
}

/// Through a transaction pooler top reads what it reads directly, each statement in a transaction
/// of its own, and says it is behind one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_through_a_transaction_pooler_reads_its_figures_without_session_state() {
    use crate::support::pgbouncer::{Mode, PgBouncer};
    let db = table(77).await;
    let bouncer = PgBouncer::start(&db, Mode::Transaction, 2, &[]).await;
    let run = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run_async()
        .await;
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["pooled"], true, "{j}");
    assert_eq!(j["backlog"]["count"], 77, "{j}");
    assert_eq!(j["stuck"]["count"], 3, "{j}");
    assert_eq!(j["insert_per_second"], 0.0, "{j}");
    let text = db
        .idemctl()
        .env("IDEMCTL_DATABASE_URL", bouncer.url())
        .args(["top", "--once", "--interval", "500ms"])
        .run_async()
        .await;
    text.assert_code(0)
        .assert_stdout_contains("through a transaction pooler: each read is a transaction");
    // No server session is left in a transaction, or with anything prepared.
    let left = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
              AND state LIKE 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(left, 0);
}

/// On a table Citus distributes, top's figures are stats' (the shards added up) and it draws one
/// line per worker with the worker's part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_citus_top_draws_one_line_per_worker_and_agrees_with_stats() {
    use crate::support::citus::Layout;
    let Some(db) = crate::citus::loaded_with(
        Layout::ByTenant,
        Mix {
            expired: 600,
            live: 200,
            fresh: 10,
            stuck: 5,
            expired_in_progress: 0,
        },
        "citus top",
    )
    .await
    else {
        return;
    };
    let stats = db.idemctl().args(["stats", "-o", "json"]).run();
    stats.assert_code(0);
    let top = db
        .idemctl()
        .args(["top", "--once", "-o", "json", "--interval", "500ms"])
        .run();
    top.assert_code(0);
    let (s, t) = (stats.json(), top.json());
    assert_eq!(t["backlog"], s["expired_backlog"], "{t}");
    assert_eq!(t["backlog"]["count"], 600, "{t}");
    assert_eq!(t["total_bytes"], s["sizes"]["total_bytes"], "{t}");
    let workers = t["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{t}");
    let per_worker: i64 = workers
        .iter()
        .map(|w| w["backlog"]["count"].as_i64().unwrap())
        .sum();
    assert_eq!(per_worker, 600, "{t}");
    assert!(workers.iter().all(|w| w["insert_per_second"] == 0.0), "{t}");
    let text = db
        .idemctl()
        .args(["top", "--once", "--interval", "500ms"])
        .run();
    text.assert_code(0);
    let lines: Vec<&str> = text
        .stdout
        .lines()
        .filter(|l| l.starts_with("│worker "))
        .collect();
    assert_eq!(lines.len(), 2, "{}", text.stdout);
    assert!(
        text.stdout.contains("Citus workers, sessions and waits"),
        "{}",
        text.stdout
    );
}

/// A table whose times are `timestamp without time zone`, read in its declared zone: top's own
/// statements (the oldest stuck key) convert as stats' do, and the figures agree with stats'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_reads_a_timestamp_table_in_its_declared_zone() {
    let db = TestDb::new().await;
    db.exec(&Schema::Corrected.ddl().replace("timestamptz", "timestamp"))
        .await;
    fixtures::load(
        &db,
        Mix {
            expired: 30,
            live: 20,
            fresh: 2,
            stuck: 4,
            expired_in_progress: 0,
        },
    )
    .await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    let zone: String = db
        .client()
        .await
        .query_one("SELECT current_setting('TimeZone')", &[])
        .await
        .unwrap()
        .get(0);
    let stats = db
        .idemctl()
        .args(["--time-zone", &zone, "stats", "-o", "json"])
        .run();
    stats.assert_code(0);
    let top = db
        .idemctl()
        .args([
            "--time-zone",
            &zone,
            "top",
            "--once",
            "-o",
            "json",
            "--interval",
            "500ms",
        ])
        .run();
    top.assert_code(0);
    let (s, t) = (stats.json(), top.json());
    assert_eq!(t["backlog"], s["expired_backlog"], "{t}");
    assert_eq!(t["stuck"]["count"], 4, "{t}");
    let held = t["oldest_stuck"]["seconds"].as_f64().unwrap();
    let oldest = s["stuck"]["oldest_since"].as_str().unwrap();
    assert!(
        held > 60.0,
        "the oldest stuck key was taken over a minute ago: {t}"
    );
    assert_eq!(
        t["oldest_live"]["key"], s["oldest_live"]["key"],
        "{t}\n{oldest}"
    );
}

/// A refresh the server does not answer within its deadline ends `top --once` with exit 1 and the
/// deadline named: here the network goes silent (everything top sends is swallowed, nothing is
/// closed) once top has resolved the table and sends its first statement naming the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_without_an_answer_within_the_refresh_deadline_exits_1_in_exact_words() {
    use crate::support::tripwire::{Tripwire, Upstream};
    let db = table(10).await;
    let port: u16 = crate::support::pg::server()
        .admin
        .get("port")
        .expect("the server's port")
        .parse()
        .expect("a port number");
    let dir = db.socket_dir().expect("a local server");
    // The figures' statements name the table in their text; the catalog's take it as a parameter.
    let wire = Tripwire::silent_at(
        Upstream::Unix(dir.join(format!(".s.PGSQL.{port}"))),
        b"\"idempotency_keys\"",
        1,
    );
    let url = db.url_with(&[
        ("host", "127.0.0.1"),
        ("port", &wire.port().to_string()),
        ("sslmode", "disable"),
    ]);
    Cmd::new()
        .env("IDEMCTL_DATABASE_URL", url)
        .args(["top", "--once", "--interval", "2s"])
        .timeout(Duration::from_secs(60))
        .run_async()
        .await
        .assert_error(1, "no answer from the server within 5s");
    assert!(
        wire.seen() >= 1,
        "top never sent a statement naming the table"
    );
}

/// A terminal that goes away under the view (its window closed while top ignores the hangup, as
/// under nohup) fails the next draw: top ends in one line on stderr naming the step, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_that_goes_away_ends_top_in_one_line_naming_the_step() {
    let db = table(50).await;
    let dir = tempfile::tempdir().unwrap();
    let (err, code) = (dir.path().join("err"), dir.path().join("code"));
    let script = dir.path().join("top.sh");
    std::fs::write(
        &script,
        format!(
            "trap '' HUP\n'{IDEMCTL}' -d '{}' top --interval 1s 2> '{}'\necho $? > '{}'\n",
            db.url(),
            err.display(),
            code.display()
        ),
    )
    .unwrap();
    let tmux = Tmux::start(&script);
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("live") && s.contains("backlog")
    });
    drop(tmux);
    let started = Instant::now();
    while std::fs::read_to_string(&code)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "top did not end after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        std::fs::read_to_string(&err).unwrap(),
        "idemctl: failed to draw the live view: Input/output error (os error 5)\n"
    );
    assert_eq!(std::fs::read_to_string(&code).unwrap(), "1\n");
}
