//! Exact expected text for every command's `--help` and for the table and plain output of stats,
//! check, evict and reclaim, so that any drift in wording or layout is caught and reviewed.
//!
//! Times, durations, sizes and fractional figures vary from run to run and are normalised (to
//! `<TIME>`, `<DUR>`, `<SIZE>`, `<X>`); in tables, runs of border and padding are collapsed. Counts
//! stay exact. The expected files live in tests/integration/snapshots/; after an intended change,
//! rewrite them with `IDEMCTL_UPDATE_SNAPSHOTS=1 cargo test --test integration snapshots::` and
//! review the diff.

use crate::fixtures::{self, Mix, Schema};
use crate::support::{Cmd, TestDb};

const UPDATE_VAR: &str = "IDEMCTL_UPDATE_SNAPSHOTS";

/// Compare `actual` with tests/integration/snapshots/NAME.txt (or rewrite it when asked).
fn assert_snapshot(name: &str, actual: &str) {
    let path = format!(
        "{}/tests/integration/snapshots/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os(UPDATE_VAR).is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected == actual {
        return;
    }
    let line = expected
        .lines()
        .zip(actual.lines())
        .position(|(e, a)| e != a)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    panic!(
        "output differs from the snapshot {path} at line {}:\n  expected: {:?}\n  actual:   {:?}\n\
         --- actual output ---\n{actual}\n---\nIf the change is intended, rewrite the snapshots with \
         `{UPDATE_VAR}=1 cargo test --test integration snapshots::` and review the diff.",
        line + 1,
        expected.lines().nth(line).unwrap_or("(end of file)"),
        actual.lines().nth(line).unwrap_or("(end of output)"),
    );
}

/// Replace what varies between runs: timestamps, durations, sizes and fractional figures (counts
/// are kept). Also how a message carrying measured figures is asserted exactly.
pub(crate) fn normalise(text: &str, table: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let word_start = |i: usize| i == 0 || !chars[i - 1].is_alphanumeric();
    let is_uuid = |i: usize| {
        chars.len() >= i + 36
            && chars[i..i + 36].iter().enumerate().all(|(n, c)| {
                if [8, 13, 18, 23].contains(&n) {
                    *c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            })
    };
    while i < chars.len() {
        let c = chars[i];
        if word_start(i) && is_uuid(i) {
            // Sample keys are random UUIDs.
            out.push_str("<UUID>");
            i += 36;
            continue;
        }
        if !c.is_ascii_digit() || !word_start(i) {
            out.push(c);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
            j += 1;
        }
        let rest: String = chars[j..chars.len().min(j + 8)].iter().collect();
        // 2026-12-01T12:37:54Z
        if j - i == 4 && rest.starts_with('-') && chars.get(i + 10) == Some(&'T') {
            let mut k = i;
            while k < chars.len() && (chars[k].is_ascii_alphanumeric() || ":-+.".contains(chars[k]))
            {
                k += 1;
            }
            out.push_str("<TIME>");
            i = k;
            continue;
        }
        let unit_end = |unit: &str| j + unit.chars().count();
        let unit_at = |unit: &str| {
            rest.starts_with(unit)
                && chars
                    .get(unit_end(unit))
                    .is_none_or(|c| !c.is_alphanumeric())
        };
        if let Some(unit) = ["ms", "d", "h", "m", "s"].into_iter().find(|u| unit_at(u)) {
            out.push_str("<DUR>");
            i = unit_end(unit);
            continue;
        }
        if let Some(unit) = [" B", " KiB", " MiB", " GiB", " TiB"]
            .into_iter()
            .find(|u| unit_at(u))
        {
            out.push_str("<SIZE>");
            i = unit_end(unit);
            continue;
        }
        let number: String = chars[i..j].iter().collect();
        if number.contains('.') || rest.starts_with(" rows/s") {
            out.push_str("<X>");
        } else {
            out.push_str(&number);
        }
        i = j;
    }
    // Two durations in a row ("6d 23h") read as one.
    let mut out = out.replace("<DUR> <DUR>", "<DUR>");
    // The adaptive pace's back-off reasons depend on what the other tests' sessions were doing
    // while evict ran (the harness's server is shared): keep the line, drop the reasons.
    if let Some(at) = out.find("<DUR> backed off (") {
        let from = at + "<DUR> backed off".len();
        if let Some(len) = out[from..].find(')') {
            out.replace_range(from..from + len + 1, "");
        }
    }
    if table {
        // Column widths follow the values: collapse borders and padding.
        let mut collapsed = String::with_capacity(out.len());
        let mut last = '\0';
        for c in out.chars() {
            if (c == '─' || c == '═' || c == ' ') && c == last {
                continue;
            }
            collapsed.push(c);
            last = c;
        }
        out = collapsed;
    }
    out
}

#[test]
fn normalising_drops_the_pace_back_off_reasons() {
    assert_eq!(
        normalise(
            "pace  adaptive: 0.1s unpaced (foreground idle), 0s paced, 0.2s backed off (1x other sessions' statements slower)\nnext",
            false
        ),
        "pace  adaptive: <DUR> unpaced (foreground idle), <DUR> paced, <DUR> backed off\nnext"
    );
}

#[test]
fn normalising_keeps_counts_and_replaces_what_varies() {
    assert_eq!(
        normalise(
            "at 2026-12-01T12:37:54Z (6d 23h ago), 8.0 KiB, 512 B, 0.05s, 1234 rows/s, 3000 rows, \
             0.3 / 0.5 ms, v15, t/3de8feec-8c50-4b45-bd54-f0562d9cc24b",
            false
        ),
        "at <TIME> (<DUR> ago), <SIZE>, <SIZE>, <DUR>, <X> rows/s, 3000 rows, <X> / <X> ms, v15, t/<UUID>"
    );
}

#[test]
fn every_help_text_is_as_expected() {
    for (name, args) in [
        ("help", vec!["--help"]),
        ("help-short", vec!["-h"]),
        ("inspect-help", vec!["inspect", "--help"]),
        ("stats-help", vec!["stats", "--help"]),
        ("top-help", vec!["top", "--help"]),
        ("check-help", vec!["check", "--help"]),
        ("evict-help", vec!["evict", "--help"]),
        ("reclaim-help", vec!["reclaim", "--help"]),
        ("completions-help", vec!["completions", "--help"]),
    ] {
        let run = Cmd::new().args(&args).env("COLUMNS", "100").run();
        run.assert_code(0).assert_stderr_empty();
        assert_snapshot(name, &run.stdout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_check_evict_and_reclaim_print_as_expected() {
    let db = TestDb::new().await;
    fixtures::table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 300,
            live: 200,
            fresh: 10,
            stuck: 20,
            expired_in_progress: 5,
        },
    )
    .await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec("ANALYZE idempotency_keys").await;
    let run = |name: &str, args: &[&str], code: i32| {
        for format in ["table", "plain"] {
            let run = db.idemctl().args(args).args(["-o", format]).run();
            run.assert_code(code);
            let mut text = normalise(&run.stdout, format == "table").replace(db.name(), "<DB>");
            // The fixtures spread keys over tenant_0 .. tenant_6 at random.
            for n in 0..10 {
                text = text.replace(&format!("tenant_{n}/"), "tenant_<N>/");
            }
            assert_snapshot(&format!("{name}-{format}"), &text);
        }
    };
    run("stats", &["stats"], 0);
    run(
        "check",
        &["check", "--max-eviction-lag", "1m", "--max-stuck", "0"],
        4,
    );
    // The table run does the work, the plain run finds nothing left: both summaries are held.
    run("evict", &["evict", "--batch-size", "100"], 0);
    run("reclaim", &["reclaim", "--yes"], 0);
}
