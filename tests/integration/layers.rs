//! The layering the code keeps: only `src/db/` knows SQL text and column names. A file under
//! `src/commands/` that holds a statement in a string, embeds a file of `sql/`, or reads a row's
//! column by name fails this test, which names the file, the line and what it found.
//!
//! One batch runner serves evict and reclaim: only `src/db/batch.rs` tells a lock timeout from
//! other failures, and a batch that meets DDL on the table is tried again (and goes on once the
//! DDL is gone), or, while the DDL stays, given up after five tries, by evict, a reclaim sweep and
//! an archived reclaim alike.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::{Mix, Schema, scalar_i64};
use crate::support::stuck::{db_with, stuck_keys};
use crate::support::{Cmd, Run, TestDb};

/// Text that only a statement contains (keywords as idemctl writes them, upper case).
const STATEMENT_MARKS: &[&str] = &[
    "SELECT ",
    "INSERT INTO",
    "DELETE FROM",
    "UPDATE {",
    "SET LOCAL",
    " SET ",
    "PREPARE ",
    "EXPLAIN",
    "DEALLOCATE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    " FROM ",
    " WHERE ",
    "{table}",
];

/// Code that reads a column by name or embeds a statement file.
const CODE_MARKS: &[&str] = &[
    ".get(\"",
    "try_get(\"",
    ".get::<",
    "try_get::<",
    "include_str!(",
];

/// The string literals of one line of Rust (a literal continued over lines is seen line by line;
/// escapes are kept as written), and the line's code outside literals and comments.
fn split_line(line: &str) -> (Vec<String>, String) {
    let mut literals = Vec::new();
    let mut code = String::new();
    let mut current: Option<String> = None;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match &mut current {
            Some(text) => {
                if c == '\\' {
                    text.push(c);
                    if let Some(&next) = chars.get(i + 1) {
                        text.push(next);
                    }
                    i += 2;
                    continue;
                }
                if c == '"' {
                    literals.push(current.take().unwrap_or_default());
                    code.push(c);
                } else {
                    text.push(c);
                }
            }
            None => {
                if c == '/' && chars.get(i + 1) == Some(&'/') {
                    break;
                }
                if c == '\'' && chars.get(i + 2) == Some(&'\'') {
                    // A char literal such as '"'.
                    i += 3;
                    continue;
                }
                if c == '"' {
                    current = Some(String::new());
                }
                code.push(c);
            }
        }
        i += 1;
    }
    if let Some(text) = current {
        literals.push(text);
    }
    (literals, code)
}

fn problems_in(path: &Path, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_tests = false;
    for (n, line) in text.lines().enumerate() {
        // Unit tests may spell out what they check.
        if line.trim_start().starts_with("#[cfg(test)]") {
            in_tests = true;
        }
        if in_tests {
            break;
        }
        let (literals, code) = split_line(line);
        let at = format!("{}:{}", path.display(), n + 1);
        for mark in CODE_MARKS {
            if code.contains(mark) || line.trim_start().starts_with(mark.trim_start_matches('.')) {
                out.push(format!(
                    "{at}: {mark} (a column read by name or an embedded statement)"
                ));
            }
        }
        for literal in &literals {
            if let Some(mark) = STATEMENT_MARKS.iter().find(|m| literal.contains(**m)) {
                out.push(format!("{at}: \"{literal}\" looks like SQL ({mark:?})"));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn command_modules_hold_no_sql_and_read_no_column_by_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/commands"), &mut files);
    files.sort();
    assert!(files.len() > 5, "{files:?}");
    let problems: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            problems_in(f.strip_prefix(root).unwrap(), &text)
        })
        .collect();
    assert!(
        problems.is_empty(),
        "move these into src/db/ (a function there returning typed rows):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_layering_check_sees_statements_and_column_reads() {
    let sample = "let n: i64 = row.get(\"n\");\n\
                  let sql = \"DELETE FROM {table} WHERE x\";\n\
                  client.batch_execute(\"SET LOCAL lock_timeout = '5ms'\");\n\
                  const Q: &str = include_str!(\"../../sql/q.sql\");\n\
                  privileges.require(&table, \"stats\", &[(\"SELECT\", true)]);\n\
                  // SELECT 1 FROM t in a comment is fine\n";
    let found = problems_in(Path::new("x.rs"), sample);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("x.rs:1: .get(\""), "{found:#?}");
}

/// Escaping for a terminal belongs to the output layer: `src/db/`, the commands and the config file
/// hand out names as the catalog and the file hold them, and a call to the sanitiser there fails
/// this test.
#[test]
fn the_data_layer_the_commands_and_the_config_file_leave_escaping_to_the_output_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/db"), &mut files);
    rust_files(&root.join("src/commands"), &mut files);
    files.push(root.join("src/config.rs"));
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let (_, code) = split_line(line);
            // `KeyTable::display` is the output layer's (escaped) name; db/ and the commands'
            // reports say `qualified_name`.
            let marks = ["sanitize", "escape_controls", "table.display()"];
            if marks.iter().any(|m| code.contains(m)) {
                found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    assert!(
        found.is_empty(),
        "escape in src/output/ (where the text is printed), not here:\n{}",
        found.join("\n")
    );
}

/// Only the batch runner classifies a failed statement: a copy of that decision elsewhere fails
/// this test.
#[test]
fn only_the_batch_runner_tells_lock_timeouts_from_other_failures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if shown == "src/db/batch.rs" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let (_, code) = split_line(line);
            if [
                "LOCK_NOT_AVAILABLE",
                "DEADLOCK_DETECTED",
                "SERIALIZATION_FAILURE",
            ]
            .iter()
            .any(|m| code.contains(m))
            {
                found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(files.len() > 20, "{files:?}");
    assert!(
        found.is_empty(),
        "classify failures in src/db/batch.rs (batch::Failure), not here:\n{}",
        found.join("\n")
    );
}

const STUCK_MIX: Mix = Mix {
    expired: 40,
    live: 20,
    fresh: 5,
    stuck: 30,
    expired_in_progress: 0,
};

/// Take a lock that lets reads through but no DELETE, UPDATE or row lock, as DDL would (the
/// lock is held until the returned client commits).
async fn ddl_lock(db: &TestDb) -> tokio_postgres::Client {
    let ddl = db.client().await;
    ddl.batch_execute("BEGIN; LOCK TABLE idempotency_keys IN EXCLUSIVE MODE")
        .await
        .unwrap();
    ddl
}

/// Transactions of the test database rolled back so far (a failed batch is one), once the
/// statistics show at least `at_least` of them (within 30 s; the server counts a session's on its
/// way out).
async fn rollbacks(db: &TestDb, at_least: i64) -> i64 {
    let sql = "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()";
    let mut seen = 0;
    for _ in 0..300 {
        seen = scalar_i64(db, sql).await;
        if seen >= at_least {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

/// Wait until a session of `db` other than the test's ran a statement with `mark` (in its first
/// lines, which the server keeps) and is idle after it: under the lock, that statement failed.
async fn failed_once(db: &TestDb, mark: &str) {
    let client = db.client().await;
    for _ in 0..3000 {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND pid <> pg_backend_pid() \
                    AND state LIKE 'idle%' AND query LIKE '%' || $1 || '%'",
                &[&mark],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no batch met the lock within 30 s");
}

/// The run of `cmd`, with the lock taken before it starts and given up once one of its batches
/// (a statement with `mark`) has failed on it.
async fn through_brief_ddl(db: &TestDb, cmd: Cmd, mark: &str) -> Run {
    let ddl = ddl_lock(db).await;
    let child = cmd.timeout(Duration::from_secs(60)).spawn();
    failed_once(db, mark).await;
    ddl.batch_execute("COMMIT").await.unwrap();
    child.wait_async().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_meets_ddl_is_tried_again_and_the_run_goes_on() {
    let db = db_with(Schema::Corrected, STUCK_MIX, true).await;
    // evict's SKIP LOCKED fallback (after its DELETE met the lock), then reclaim's sweep batch.
    let runs = [
        (
            vec!["evict", "-o", "json"],
            "-- evict: a range of the expiry index",
            "rows_evicted",
            40,
        ),
        (
            vec!["reclaim", "--yes", "-o", "json"],
            "-- reclaim --action delete: one batch",
            "rows_reclaimed",
            30,
        ),
    ];
    for (args, mark, field, rows) in runs {
        let before = rollbacks(&db, 0).await;
        let run = through_brief_ddl(&db, db.idemctl().args(&args), mark).await;
        run.assert_code(0);
        assert_eq!(run.json()[field], rows, "{run}");
        let rolled_back = rollbacks(&db, before + 1).await - before;
        assert!(rolled_back >= 1, "{args:?} met the lock: {run}");
    }
    assert!(stuck_keys(&db).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_keeps_meeting_ddl_is_given_up_after_five_tries() {
    let db = db_with(Schema::Corrected, STUCK_MIX, true).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("reclaimed.jsonl");
    let ddl = ddl_lock(&db).await;
    // (the command, its message, transactions each try rolls back)
    let runs: [(Vec<&str>, &str, i64); 3] = [
        (
            vec!["evict"],
            "a batch could not get its locks within lock_timeout (a live transaction or DDL holds them)",
            2,
        ),
        (
            vec!["reclaim", "--yes"],
            "could not get a lock another session holds in 5 tries",
            1,
        ),
        (
            vec!["reclaim", "--yes", "--archive", archive.to_str().unwrap()],
            "could not get a lock another session holds in 5 tries",
            1,
        ),
    ];
    for (args, message, per_try) in runs {
        let before = rollbacks(&db, 0).await;
        let run = db
            .idemctl()
            .args(&args)
            .timeout(Duration::from_secs(60))
            .run_async()
            .await;
        run.assert_code(1).assert_stderr_contains(message);
        // Four pauses of 200 ms between the five tries.
        assert!(run.elapsed >= Duration::from_millis(800), "{run}");
        let tries = 5 * per_try;
        let rolled_back = rollbacks(&db, before + tries).await - before;
        assert!(
            rolled_back >= tries,
            "{args:?}: {rolled_back} rollbacks, {run}"
        );
    }
    ddl.batch_execute("COMMIT").await.unwrap();
    let lines = std::fs::read_to_string(&archive).unwrap_or_default();
    assert!(!lines.contains("\"key\""), "no key was archived: {lines}");
    assert_eq!(stuck_keys(&db).await.len(), 30, "nothing was reclaimed");
    assert_eq!(
        scalar_i64(&db, "SELECT count(*) FROM idempotency_keys").await,
        95,
        "nothing was evicted"
    );
}

/// Commands whose reports the output layer renders: none of them builds a document for people.
const RENDERED_BY_OUTPUT: &[&str] = &[
    "src/commands/check.rs",
    "src/commands/evict/mod.rs",
    "src/commands/inspect.rs",
    "src/commands/reclaim/apply.rs",
    "src/commands/reclaim/mod.rs",
    "src/commands/reclaim/placements.rs",
    "src/commands/reclaim/plan.rs",
    "src/commands/reclaim/preview.rs",
    "src/commands/reclaim/report.rs",
    "src/commands/reclaim/request.rs",
    "src/commands/reclaim/sweep.rs",
    "src/commands/reclaim/validation.rs",
    "src/commands/reclaim/writing.rs",
    "src/commands/stats.rs",
];

/// What building a document for people looks like.
const DOC_MARKS: &[&str] = &["Doc::default", "Doc {", ".fields(", ".rows(", "doc.text("];

/// Modules that hand typed values (rates, caps, why a step did not run, a stored fingerprint, what
/// the Citus workers hold and did) to the output layer, which words them: a text builder, a
/// formatting helper or a check finding written here is rendering.
const WORDED_BY_OUTPUT: &[&str] = &[
    "src/commands/check.rs",
    "src/commands/stats.rs",
    "src/commands/evict/pace.rs",
    "src/commands/evict/placements.rs",
    "src/commands/evict/rate.rs",
    "src/commands/evict/replica.rs",
    "src/commands/evict/vacuum.rs",
    "src/commands/evict/worker.rs",
    "src/commands/shards.rs",
    "src/db/record.rs",
];

/// What wording values for people looks like (`, String>`: an error worded as text, such as a flag
/// value's parser, which belongs with the others in src/cli.rs).
const WORDING_MARKS: &[&str] = &[
    "-> String",
    "fn describe",
    "fn shown",
    "fn status",
    "human_secs",
    "human_bytes",
    "rfc3339(",
    "sanitize",
    "escape_controls",
    "Finding {",
    "finding(",
    ", String>",
];

/// The lines of `text` (before its unit tests) whose code holds one of `marks`.
fn rendering_in(shown: &str, text: &str, marks: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let (_, code) = split_line(line);
        if marks.iter().any(|m| code.contains(m)) {
            found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
        }
    }
    found
}

/// Where no prose is written: every file of these hands what it found to the output layer, which
/// words it.
const WORDED_BY_OUTPUT_EVERYWHERE: &[&str] = &["src/commands", "src/conn", "src/config.rs"];

/// Calls whose string literals are words for people.
const MESSAGE_CALLS: &[&str] = &[
    ".context(",
    "with_context(",
    "anyhow!(",
    "bail!(",
    "eprintln!(",
    "println!(",
    "format!(",
    "fail(",
];

/// Prose that stays where it is, each with its reason: `(file, the literal's start, why)`.
const PROSE_ALLOWED: &[(&str, &str, &str)] = &[(
    "src/commands/docs.rs",
    "The libpq connection keywords {} respectively",
    "the man page's ENVIRONMENT entry for the libpq variables, documentation beside the other \
     entries of its table (the docs test holds it to the README), not a message",
)];

/// The string literals passed to a message call in `text` (before its unit tests), each with the
/// line its call began on. Comments, char literals and the literals of other calls are skipped.
fn message_literals(text: &str) -> Vec<(usize, String)> {
    let text = text.find("#[cfg(test)]").map_or(text, |at| &text[..at]);
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut line, mut depth, mut i) = (1, 0i32, 0);
    // The code before the current position (literals left out), and the open message calls as
    // (depth inside the call, line it began on).
    let mut code = String::new();
    let mut open: Vec<(i32, usize)> = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            continue;
        }
        if c == '\'' && chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') {
            i += 4;
            continue;
        }
        if c == '"' {
            let began = line;
            let mut lit = String::new();
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    lit.push(chars[i]);
                    i += 1;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                lit.push(chars[i]);
                i += 1;
            }
            i += 1;
            if let Some((_, at)) = open.first() {
                out.push((*at, lit));
            } else {
                let _ = began;
            }
            code.push('"');
            continue;
        }
        match c {
            '\n' => line += 1,
            '(' => {
                depth += 1;
                code.push(c);
                let starts_call = MESSAGE_CALLS.iter().any(|m| {
                    code.ends_with(m)
                        && (m.starts_with('.')
                            || code[..code.len() - m.len()]
                                .chars()
                                .next_back()
                                .is_none_or(|p| !(p.is_alphanumeric() || p == '_')))
                });
                if starts_call {
                    open.push((depth, line));
                }
                i += 1;
                continue;
            }
            ')' => {
                if open.last().is_some_and(|(d, _)| *d == depth) {
                    open.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
        code.push(c);
        if code.len() > 64 {
            code.drain(..code.len() - 32);
        }
        i += 1;
    }
    out
}

/// Whether a literal reads as English: with its `{}` placeholders and continuations taken out,
/// three words in a row of lowercase letters (`failed to open`), not SQL, an identifier or a
/// format alone.
fn reads_as_prose(literal: &str) -> bool {
    let literal = without_continuations(literal);
    let mut plain = String::new();
    let mut braces = 0;
    for c in literal.chars() {
        match c {
            '{' => braces += 1,
            '}' if braces > 0 => braces -= 1,
            _ if braces == 0 => plain.push(c),
            _ => {}
        }
    }
    let mut run = 0;
    for token in plain.split_whitespace() {
        let word = token
            .trim_start_matches('(')
            .trim_end_matches([',', ';', ':', '.', ')', '?']);
        let mut letters = word.chars();
        let is_word = word.len() >= 2
            && letters.next().is_some_and(|c| c.is_ascii_alphabetic())
            && letters.all(|c| c.is_ascii_lowercase() || c == '\'' || c == '-');
        run = if is_word { run + 1 } else { 0 };
        if run >= 3 {
            return true;
        }
    }
    false
}

/// The prose literals of one file's message calls, as `file:line: "literal"`, less those allowed.
fn prose_in(shown: &str, text: &str) -> Vec<String> {
    message_literals(text)
        .into_iter()
        .filter(|(_, lit)| reads_as_prose(lit))
        .filter(|(_, lit)| {
            !PROSE_ALLOWED
                .iter()
                .any(|(file, start, _)| *file == shown && lit.starts_with(start))
        })
        .map(|(line, lit)| format!("{shown}:{line}: \"{lit}\""))
        .collect()
}

#[test]
fn commands_hand_their_reports_to_the_output_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut files = Vec::new();
    for place in WORDED_BY_OUTPUT_EVERYWHERE {
        let path = root.join(place);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    files.sort();
    assert!(files.len() > 30, "{files:?}");
    for f in &files {
        // A module's unit tests in their own file (src/conn/tests.rs) spell out what they check.
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        found.extend(prose_in(&shown, &std::fs::read_to_string(f).unwrap()));
    }
    for shown in RENDERED_BY_OUTPUT {
        let text = std::fs::read_to_string(root.join(shown)).unwrap();
        found.extend(rendering_in(shown, &text, DOC_MARKS));
    }
    for shown in WORDED_BY_OUTPUT {
        let text = std::fs::read_to_string(root.join(shown)).unwrap();
        let marks: Vec<&str> = DOC_MARKS.iter().chain(WORDING_MARKS).copied().collect();
        found.extend(rendering_in(shown, &text, &marks));
    }
    // An allowance whose prose is gone must go too.
    for (file, start, _) in PROSE_ALLOWED {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            message_literals(&text)
                .iter()
                .any(|(_, lit)| lit.starts_with(start) && reads_as_prose(lit)),
            "PROSE_ALLOWED names prose no longer in {file}: {start:?}"
        );
    }
    assert!(
        found.is_empty(),
        "word it in src/output/ (a function taking what was found or the command's report), not \
         here:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_prose_check_sees_words_in_message_calls_and_leaves_code_alone() {
    let sample = "fn f() -> Result<()> {\n\
                  let x = y.context(\"failed to open a session\")?;\n\
                  let z = w.with_context(|| {\n\
                      format!(\"cannot read {path}: the \\\n         file is gone\")\n\
                  })?;\n\
                  return Err(fail(Exit::Usage, \"--flag is refused here\"));\n\
                  let q = format!(\"{}.{}\", schema, name);\n\
                  let s = format!(\"SELECT count(*) FROM t WHERE a = $1\");\n\
                  let t = refuse_or_fail(x, \"not a message call at all\");\n\
                  let u = \"a plain literal outside any call\";\n\
                  // format!(\"in a comment it is fine\")\n\
                  }\n\
                  #[cfg(test)]\n\
                  mod tests { fn g() { x.context(\"unit tests may say anything\"); } }\n";
    let found = prose_in("x.rs", sample);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("x.rs:2: "), "{found:#?}");
    // The call's line: the closure's literal belongs to with_context( on line 3.
    assert!(found[1].starts_with("x.rs:3: "), "{found:#?}");
    assert!(found[2].starts_with("x.rs:7: "), "{found:#?}");
}

#[test]
fn the_rendering_check_sees_text_built_for_people() {
    let sample = "pub fn describe(&self) -> String {\n\
                  let t = format!(\"in {}\", human_secs(self.seconds));\n\
                  let mut d = Doc::default();\n\
                  d.rows(Some(&title), &[\"worker\"], rows);\n\
                  out.push(finding(\"citus workers\", Status::Ok, detail, None));\n\
                  pub fn parse(s: &str) -> Result<f64, String> {\n\
                  #[serde(with = \"time::serde::rfc3339\")]\n\
                  // human_secs in a comment is fine\n";
    let marks: Vec<&str> = DOC_MARKS.iter().chain(WORDING_MARKS).copied().collect();
    let found = rendering_in("x.rs", sample, &marks);
    assert_eq!(found.len(), 6, "{found:#?}");
    assert!(found[0].starts_with("x.rs:1: "), "{found:#?}");
}

/// Modules whose refusals (an error with its exit code, `crate::exit::fail`) are worded by the
/// output layer, from what the command found.
const REFUSALS_WORDED_BY_OUTPUT: &[&str] = &["src/commands"];

/// The `fail(...)` calls of `text` (before its unit tests) that word their message themselves: a
/// string literal among the call's arguments other than a flag's name (`"--status"`).
fn worded_failures(shown: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    // Parentheses open in the `fail(` call being read, and the line it began on.
    let mut open: Option<(i32, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let (literals, code) = split_line(line);
        let worded = literals.iter().any(|l| {
            !(l.starts_with("--") && l[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        });
        let mut rest = code.as_str();
        if open.is_none() {
            let start = code.match_indices("fail(").find(|(at, _)| {
                code[..*at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
            });
            let Some((at, _)) = start else { continue };
            open = Some((0, n));
            rest = &code[at + "fail".len()..];
        }
        let Some((mut depth, began)) = open else {
            continue;
        };
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i;
                break;
            }
        }
        if worded && rest[..end].contains('"') {
            found.push(format!("{shown}:{}: {}", began + 1, line.trim()));
        }
        open = (depth > 0).then_some((depth, began));
    }
    found
}

#[test]
fn refusals_are_worded_by_the_output_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in REFUSALS_WORDED_BY_OUTPUT {
        rust_files(&root.join(dir), &mut files);
    }
    files.sort();
    assert!(files.len() > 5, "{files:?}");
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        found.extend(worded_failures(
            &shown,
            &std::fs::read_to_string(f).unwrap(),
        ));
    }
    assert!(
        found.is_empty(),
        "word the message in src/output/ (a function taking what was found), not here:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_refusal_check_sees_messages_worded_in_place() {
    let sample = "return Err(fail(Exit::Usage, format!(\"{flag} is refused\")));\n\
                  Err(fail(\n\
                      Exit::PermissionDenied,\n\
                      format!(\n\
                          \"role {} may not\",\n\
                          role\n\
                      ),\n\
                  ))\n\
                  Err(fail(Exit::Usage, crate::output::evict::refused(flag)))\n\
                  Err(fail(Exit::Usage, output::only_for_fail(\"--status\")))\n\
                  let x = \"a\"; refuse_or_fail(client, e, context())\n\
                  Err(fail(Exit::Internal, worded(&e))); // \"a comment\"\n";
    let found = worded_failures("x.rs", sample);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("x.rs:1: "), "{found:#?}");
    assert!(found[1].starts_with("x.rs:2: "), "{found:#?}");
}

/// The layer of a file under `src/`, and the layers it may import. Imports run one way:
/// entry -> commands -> cli -> output/metrics -> bottom, and commands -> db -> conn -> bottom,
/// where the bottom is the plain domain types, exit codes and the data the reports are made of.
fn layer_of(file: &str) -> (&'static str, &'static [&'static str]) {
    const BOTTOM: &[&str] = &["bottom"];
    if file == "src/main.rs" || file == "src/lib.rs" {
        (
            "entry",
            &["entry", "commands", "cli", "output", "db", "conn", "bottom"],
        )
    } else if file.starts_with("src/commands/")
        || ["src/context.rs", "src/progress.rs", "src/config.rs"].contains(&file)
    {
        (
            "commands",
            &["commands", "cli", "output", "db", "conn", "bottom"],
        )
    } else if file == "src/cli.rs" {
        ("cli", &["cli", "output", "bottom"])
    } else if file.starts_with("src/output/") || file.starts_with("src/metrics/") {
        ("output", &["output", "bottom"])
    } else if file.starts_with("src/db/") {
        ("db", &["db", "conn", "bottom"])
    } else if file.starts_with("src/conn/") {
        ("conn", &["conn", "bottom"])
    } else {
        // src/domain.rs, src/exit.rs, src/fingerprint.rs, src/sample.rs, src/report/...
        ("bottom", BOTTOM)
    }
}

/// The module path of a file under `src/` (`src/db/mod.rs` is `db`; lib.rs and main.rs the root).
fn module_of(file: &str) -> Vec<String> {
    let path = file.trim_start_matches("src/").trim_end_matches(".rs");
    let mut parts: Vec<String> = path.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// The file that defines what a module path names: the longest prefix that is a module file, else
/// lib.rs (an item defined there).
fn file_of(path: &[String], files: &std::collections::BTreeSet<String>) -> String {
    for k in (1..=path.len()).rev() {
        let base = format!("src/{}", path[..k].join("/"));
        for candidate in [format!("{base}.rs"), format!("{base}/mod.rs")] {
            if files.contains(&candidate) {
                return candidate;
            }
        }
    }
    "src/lib.rs".to_owned()
}

/// The paths a file's code names (`crate::`, `super::`, `self::`, and its own child modules), as
/// module paths from the crate root, with `use` groups expanded. Comments and unit tests are left
/// out.
fn named_paths(file: &str, text: &str) -> Vec<Vec<String>> {
    let mut code = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let (_, outside) = split_line(line);
        code.push_str(&outside);
        code.push('\n');
    }
    let children: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    let me = module_of(file);
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let boundary = i == 0
            || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        let word: String = chars[i..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        if !boundary || word.is_empty() {
            i += 1;
            continue;
        }
        let starts =
            ["crate", "super", "self"].contains(&word.as_str()) || children.contains(&word);
        let after = i + word.len();
        if !starts || chars.get(after..after + 2) != Some(&[':', ':']) {
            i = after;
            continue;
        }
        // Read the path and, for a `use` group, its items (one level of nesting is enough here).
        let mut j = after;
        let mut segments = vec![word.clone()];
        let mut group = Vec::new();
        while chars.get(j..j + 2) == Some(&[':', ':']) {
            j += 2;
            if chars.get(j) == Some(&'{') {
                let mut depth = 0;
                let start = j + 1;
                while j < chars.len() {
                    match chars[j] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                    j += 1;
                }
                let inner: String = chars[start..j.min(chars.len())].iter().collect();
                let mut depth = 0;
                let mut item = String::new();
                for c in inner.chars().chain([',']) {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            let head = item
                                .trim()
                                .split(['{', ' '])
                                .next()
                                .unwrap_or("")
                                .trim()
                                .to_owned();
                            group.push(
                                head.split("::")
                                    .filter(|s| !s.is_empty() && *s != "self")
                                    .map(str::to_owned)
                                    .collect::<Vec<_>>(),
                            );
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                break;
            }
            let next: String = chars[j..]
                .iter()
                .take_while(|c| c.is_alphanumeric() || **c == '_')
                .collect();
            if next.is_empty() {
                break;
            }
            j += next.len();
            segments.push(next);
        }
        i = j;
        // Resolve the head against the crate root.
        let mut resolved: Vec<String> = Vec::new();
        let mut rest = segments.as_slice();
        if rest[0] == "crate" {
            rest = &rest[1..];
        } else {
            resolved = me.clone();
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        resolved.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        resolved.extend(rest.iter().cloned());
        if group.is_empty() {
            out.push(resolved);
        } else {
            for g in group {
                let mut p = resolved.clone();
                p.extend(g);
                out.push(p);
            }
        }
    }
    out
}

/// Every import between two files of `src/`, as (importing file, imported file).
fn import_graph() -> std::collections::BTreeSet<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    rust_files(&root.join("src"), &mut paths);
    let files: std::collections::BTreeSet<String> = paths
        .iter()
        .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
        .collect();
    let mut edges = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for path in named_paths(file, &text) {
            let target = file_of(&path, &files);
            if &target != file {
                edges.insert((file.clone(), target));
            }
        }
    }
    edges
}

/// The groups of files that import each other in a circle (strongly connected, more than one).
fn circles(edges: &std::collections::BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    // What each file reaches; two files are in one circle when each reaches the other.
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.to_owned()];
        while let Some(f) = todo.pop() {
            for n in next.get(f.as_str()).into_iter().flatten() {
                if seen.insert((*n).to_owned()) {
                    todo.push((*n).to_owned());
                }
            }
        }
        seen
    };
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|(a, b)| [a.as_str(), b.as_str()])
        .collect();
    let reaches: BTreeMap<&str, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reaches[n].contains(*n) {
            continue;
        }
        let group: Vec<String> = nodes
            .iter()
            .filter(|m| reaches[n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).to_owned())
            .collect();
        done.extend(group.iter().cloned());
        out.push(group);
    }
    out
}

/// No import runs against the layers and no circle holds more than two files: the test names
/// every import that does, and every such circle.
#[test]
fn imports_run_one_way_through_the_layers() {
    let edges = import_graph();
    assert!(
        edges.len() > 100,
        "the import graph looks too small: {edges:#?}"
    );
    let mut against = Vec::new();
    for (from, to) in &edges {
        let (_, allowed) = layer_of(from);
        let (layer, _) = layer_of(to);
        let to_lib = to == "src/lib.rs" && from != "src/main.rs";
        if !(allowed.contains(&layer)) || to_lib {
            against.push(format!(
                "{from} ({}) imports {to} ({layer})",
                layer_of(from).0
            ));
        }
    }
    assert!(
        against.is_empty(),
        "imports against the layers (see CONTRIBUTING.md: move the type down to src/domain.rs or \
         the report data, or the code up):\n{}",
        against.join("\n")
    );
    let big: Vec<Vec<String>> = circles(&edges)
        .into_iter()
        .filter(|c| c.len() > 2)
        .collect();
    assert!(
        big.is_empty(),
        "import circles of more than two files (move what both sides need into a module that \
         imports neither):\n{big:#?}"
    );
}

/// The check sees an import against the layers and a circle of three files.
#[test]
fn the_import_check_sees_imports_against_the_layers_and_circles() {
    let edge = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    let edges: std::collections::BTreeSet<(String, String)> = [
        edge("src/db/a.rs", "src/db/b.rs"),
        edge("src/db/b.rs", "src/db/c.rs"),
        edge("src/db/c.rs", "src/db/a.rs"),
        edge("src/db/c.rs", "src/db/d.rs"),
        edge("src/db/d.rs", "src/db/c.rs"),
    ]
    .into();
    assert_eq!(
        circles(&edges),
        [vec![
            "src/db/a.rs".to_owned(),
            "src/db/b.rs".to_owned(),
            "src/db/c.rs".to_owned(),
            "src/db/d.rs".to_owned(),
        ]]
    );
    let two: std::collections::BTreeSet<(String, String)> = [
        edge("src/db/a.rs", "src/db/b.rs"),
        edge("src/db/b.rs", "src/db/a.rs"),
    ]
    .into();
    assert!(circles(&two).iter().all(|c| c.len() == 2));
    assert!(
        !layer_of("src/output/names.rs")
            .1
            .contains(&layer_of("src/commands/shards.rs").0)
    );
    assert!(
        !layer_of("src/output/evict.rs")
            .1
            .contains(&layer_of("src/db/mod.rs").0)
    );
    assert!(
        !layer_of("src/db/table.rs")
            .1
            .contains(&layer_of("src/cli.rs").0)
    );
}

#[test]
fn the_import_check_resolves_paths_groups_and_child_modules() {
    let text = "mod pace;\n\
                use crate::db::{self, KeyTable, queries::Capped};\n\
                use super::rate::Caps;\n\
                let s = pace::State::Idle; // crate::output::x in a comment\n\
                crate::domain::one_line(&e);\n";
    let found = named_paths("src/commands/evict/mod.rs", text);
    let shown: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        [
            "db",
            "db::KeyTable",
            "db::queries::Capped",
            "commands::rate::Caps",
            "commands::evict::pace::State::Idle",
            "domain::one_line",
        ],
        "{found:?}"
    );
    assert_eq!(layer_of("src/output/evict.rs").0, "output");
    assert!(!layer_of("src/db/mod.rs").1.contains(&"output"));
}

/// The functions of `text` longer than `limit` lines, as `(name, first line, lines)`: from the
/// line that declares one to the closing brace at its indentation.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut rest = body;
        for word in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        let Some(name) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if line.trim_end().ends_with(';') || line.trim_end().ends_with('}') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| *l == close)
            && end + 1 > limit
        {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

#[test]
fn no_function_is_over_a_hundred_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        for (name, at, n) in long_functions(&text, 100) {
            found.push(format!("{shown}:{at}: {name} ({n} lines)"));
        }
    }
    assert!(files.len() > 20, "{files:?}");
    assert!(
        found.is_empty(),
        "split these along their steps (see CONTRIBUTING.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_length_check_counts_a_function_to_its_closing_brace() {
    let mut text =
        String::from("impl X {\n    pub(crate) async fn long(\n        a: u8,\n    ) {\n");
    for _ in 0..98 {
        text.push_str("        a;\n");
    }
    text.push_str("    }\n\n    fn short() {}\n}\nfn f() -> u8 {\n    1\n}\n");
    assert_eq!(
        long_functions(&text, 100),
        [("long".to_owned(), 2, 102)],
        "{text}"
    );
    assert!(long_functions(&text, 102).is_empty());
}

/// The lint attributes of `text` (`#[allow(...)]`, `#[expect(...)]`, inner or outer) that give no
/// `reason`, by first line.
fn lints_without_reason(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let opens = ["#[allow(", "#![allow(", "#[expect(", "#![expect("]
            .iter()
            .any(|a| t.starts_with(a));
        if !opens {
            continue;
        }
        // The attribute ends at the first line that closes it.
        let end = lines[i..]
            .iter()
            .position(|l| l.trim_end().ends_with(")]"))
            .map_or(lines.len(), |n| i + n + 1);
        if !lines[i..end].iter().any(|l| l.contains("reason = ")) {
            out.push(i + 1);
        }
    }
    out
}

#[test]
fn every_allowed_lint_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        for at in lints_without_reason(&text) {
            found.push(format!("{shown}:{at}"));
        }
    }
    assert!(
        found.is_empty(),
        "give these a reason = \"...\":\n{}",
        found.join("\n")
    );
    let sample = "#[allow(dead_code)]\nfn a() {}\n#[expect(\n    clippy::x,\n    reason = \"y\"\n)]\nfn b() {}\n";
    assert_eq!(lints_without_reason(sample), [1]);
}

/// The message functions of `src/output/` (`pub(crate) fn NAME(...) -> String` in a module's
/// non-test part) that no test asserts exactly, as `module::function`. This list may only shrink:
/// a function that gains an exact assertion must come off it, and a new function must arrive with
/// one.
const UNASSERTED_MESSAGES: &[&str] = &[];

/// The string literals of `text` as written (escapes kept), skipping char literals such as '"'.
fn literals_of(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            continue;
        }
        if chars[i] != '"' {
            i += 1;
            continue;
        }
        let mut lit = String::new();
        i += 1;
        while i < chars.len() && chars[i] != '"' {
            if chars[i] == '\\' && i + 1 < chars.len() {
                lit.push(chars[i]);
                i += 1;
            }
            lit.push(chars[i]);
            i += 1;
        }
        out.push(lit);
        i += 1;
    }
    out
}

/// `text` with Rust's string continuations (a backslash, the line break and the next line's
/// leading blanks) taken out, so a literal reads as it is written on one line.
fn without_continuations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\\n") {
        out.push_str(&rest[..at]);
        rest = rest[at + 2..].trim_start();
    }
    out.push_str(rest);
    out
}

/// The text of a format string between its `{...}` placeholders, in order.
fn between_placeholders(lit: &str) -> Vec<String> {
    let (mut piece, mut depth) = (String::new(), 0);
    let mut pieces = Vec::new();
    for c in lit.chars() {
        match c {
            '{' => {
                depth += 1;
                pieces.push(std::mem::take(&mut piece));
            }
            '}' if depth > 0 => depth -= 1,
            _ if depth == 0 => piece.push(c),
            _ => {}
        }
    }
    pieces.push(piece);
    pieces
}

/// The longest fixed piece (18 characters or more, at most 60) of the literals in a message
/// function's body: the text between its `{}` placeholders.
fn fixed_piece(body: &str) -> Option<String> {
    let mut best: Option<String> = None;
    for lit in literals_of(body) {
        let lit = without_continuations(&lit);
        for p in between_placeholders(&lit) {
            if p.chars().count() >= 18 && best.as_ref().is_none_or(|b| p.len() > b.len()) {
                best = Some(p);
            }
        }
    }
    best.map(|b| b.chars().take(60).collect())
}

/// The message functions of one output module's source, as `(name, fixed piece)`.
fn message_functions(text: &str) -> Vec<(String, String)> {
    let text = text.find("#[cfg(test)]").map_or(text, |at| &text[..at]);
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\npub(crate) fn ") {
        rest = &rest[at + "\npub(crate) fn ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = &rest[..open];
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        let after = rest[open + close + 1..].trim_start();
        let Some(body) = after
            .strip_prefix("->")
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix("String"))
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix('{'))
        else {
            continue;
        };
        let body = body.find("\n}\n").map_or(body, |end| &body[..end]);
        if let Some(piece) = fixed_piece(body) {
            out.push((name.to_owned(), piece));
        }
    }
    out
}

/// Whether `piece` occurs in `tests` inside an exact assertion: `assert_error(` or
/// `assert_stderr(` within the 1,200 characters before it, `assert_eq!` within 300, or a
/// `let NAME = "..."` holding it that a later `assert_error(CODE, NAME)` asserts.
fn asserted_exactly(tests: &str, piece: &str) -> bool {
    let bound_and_asserted = |at: usize| {
        let start = tests[..at].rfind("let ").unwrap_or(0);
        let decl = &tests[start..at];
        let Some((name, value)) = decl["let ".len()..].split_once(" = ") else {
            return false;
        };
        let name = name.trim();
        if decl.contains(';') || !value.trim_start().starts_with('"') || name.contains(' ') {
            return false;
        }
        let mut end = (at + 3000).min(tests.len());
        while !tests.is_char_boundary(end) {
            end -= 1;
        }
        tests[at..end].contains(&format!(", {name})")) && tests[at..end].contains("assert_error(")
    };
    let before = |at: usize, n: usize| {
        let mut from = at.saturating_sub(n);
        while !tests.is_char_boundary(from) {
            from += 1;
        }
        &tests[from..at]
    };
    tests.match_indices(piece).any(|(at, _)| {
        let near = before(at, 1200);
        near.contains("assert_error")
            || near.contains("assert_stderr(")
            || before(at, 300).contains("assert_eq!")
            || bound_and_asserted(at)
    })
}

#[test]
fn the_list_of_messages_without_an_exact_assertion_only_shrinks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut test_files = Vec::new();
    rust_files(&root.join("tests"), &mut test_files);
    test_files.sort();
    let mut tests = String::new();
    for f in &test_files {
        // This file names functions, never their words; leave the list out all the same.
        tests.push_str(&std::fs::read_to_string(f).unwrap());
        tests.push('\n');
    }
    let tests = without_continuations(&tests);
    let mut modules: Vec<_> = std::fs::read_dir(root.join("src/output"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    modules.sort();
    let mut seen = 0;
    let mut unasserted = Vec::new();
    for m in &modules {
        let module = m.file_stem().unwrap().to_string_lossy().into_owned();
        for (name, piece) in message_functions(&std::fs::read_to_string(m).unwrap()) {
            seen += 1;
            if !asserted_exactly(&tests, &piece) {
                unasserted.push(format!("{module}::{name}"));
            }
        }
    }
    assert!(seen > 50, "found only {seen} message functions");
    eprintln!(
        "{} of {seen} message functions without an exact assertion",
        unasserted.len()
    );
    let now_asserted: Vec<_> = UNASSERTED_MESSAGES
        .iter()
        .filter(|n| !unasserted.iter().any(|u| u == *n))
        .collect();
    let new: Vec<_> = unasserted
        .iter()
        .filter(|u| !UNASSERTED_MESSAGES.contains(&u.as_str()))
        .collect();
    assert!(
        now_asserted.is_empty(),
        "asserted exactly now, take them off UNASSERTED_MESSAGES: {now_asserted:?}"
    );
    assert!(
        new.is_empty(),
        "no test asserts these messages exactly (text and exit code, with assert_error): {new:?}"
    );
}

#[test]
fn the_message_scan_finds_a_function_and_its_fixed_words() {
    let text = "use x;\n\npub(crate) fn refused(table: &str) -> String {\n    format!(\n        \
                \"table {table} has no expiry index, \\\n         so evict refuses\"\n    )\n}\n\
                \npub(crate) fn count(n: u8) -> u8 {\n    n\n}\n#[cfg(test)]\n\
                \npub(crate) fn hidden() -> String {\n    \"a long enough piece of words\".into()\n}\n";
    let found = message_functions(text);
    assert_eq!(
        found,
        [(
            "refused".to_owned(),
            " has no expiry index, so evict refuses".to_owned()
        )]
    );
    let near = "r.assert_error(2, \"table t has no expiry index, so evict refuses\");";
    assert!(asserted_exactly(near, " has no expiry index, so evict"));
    let bound = "let refusal = \"table t has no expiry index, so evict refuses\";\n\
                 other();\nrun.assert_error(2, refusal);";
    assert!(asserted_exactly(bound, " has no expiry index, so evict"));
    assert!(!asserted_exactly(
        "r.assert_stderr_contains(\"has no expiry index, so evict\");",
        " has no expiry index, so evict"
    ));
}

/// `text` with each `#[cfg(test)]` item (the attribute to its item's closing brace) blanked out,
/// line breaks kept so lines keep their numbers: unit tests may spell out what they check.
fn without_unit_tests(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(at) = out.find("#[cfg(test)]") {
        let Some(open) = out[at..].find('{').map(|o| at + o) else {
            break;
        };
        let mut depth = 0;
        let mut end = out.len();
        for (i, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i + 1;
                break;
            }
        }
        let blank: String = out[at..end].chars().filter(|c| *c == '\n').collect();
        out.replace_range(at..end, &blank);
    }
    out
}

/// The string literals of Rust source `text` (comments and char literals skipped, a string
/// continued with a backslash read as one line), each with the line it starts on.
fn literals_by_line(text: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        match chars[i] {
            '\n' => line += 1,
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 2,
            '\'' if chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') => i += 3,
            '"' => {
                let start = line;
                let mut lit = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && chars.get(i + 1) == Some(&'\n') {
                        i += 1;
                        while i < chars.len() && chars[i].is_whitespace() {
                            line += usize::from(chars[i] == '\n');
                            i += 1;
                        }
                        continue;
                    }
                    if chars[i] == '\\' {
                        lit.push(chars[i]);
                        i += 1;
                    }
                    if let Some(&c) = chars.get(i) {
                        line += usize::from(c == '\n');
                        lit.push(c);
                    }
                    i += 1;
                }
                out.push((start, lit));
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether a string literal of src/db/ reads as words for people ([`reads_as_prose`]), once SQL
/// comments (`-- ...`, to the line's end) and the two timestamp type names are taken out: SQL as
/// idemctl writes it has upper-case keywords between its lower-case identifiers, so a statement
/// does not read as a sentence.
fn sentence_in_literal(literal: &str) -> bool {
    let mut text = String::new();
    let mut rest = literal;
    while let Some(at) = rest.find("--") {
        text.push_str(&rest[..at]);
        let end = [rest[at..].find('\n'), rest[at..].find("\\n")]
            .into_iter()
            .flatten()
            .min()
            .map_or(rest.len(), |e| at + e);
        rest = &rest[end..];
    }
    text.push_str(rest);
    let text = text
        .replace("timestamp without time zone", "T")
        .replace("timestamp with time zone", "T");
    reads_as_prose(&text)
}

/// The literals of `text` (before and beside its unit tests) that read as prose, as
/// `file:line: "literal"`.
fn sentences_in(shown: &str, text: &str) -> Vec<String> {
    literals_by_line(&without_unit_tests(text))
        .into_iter()
        .filter(|(_, lit)| sentence_in_literal(lit))
        .map(|(line, lit)| format!("{shown}:{line}: \"{lit}\""))
        .collect()
}

/// The database layer hands typed values up (src/report/db.rs: a failed step, a refusal, a
/// column's problem, why a profile matched) and src/output/ words them: a string literal under
/// `src/db/` that reads as a sentence fails this test, which names the file, the line and the
/// literal. SQL, generated or not, is wanted there and passes.
#[test]
fn the_data_layer_writes_no_prose() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/db"), &mut files);
    files.sort();
    assert!(files.len() > 10, "{files:?}");
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        found.extend(sentences_in(&shown, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(
        found.is_empty(),
        "word these in src/output/ from a typed value of src/report/db.rs (a Step for a failed \
         statement's context, a Refusal or Fault for an error with its exit code), not here:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_prose_check_sees_sentences_and_lets_sql_through() {
    let sample = "let r = q.await.context(\"failed to read the key\")?;\n\
                  return Err(fail(Exit::Usage, format!(\"table {t} has no column {c}\")));\n\
                  let e = anyhow!(\n    \"the batch was \\\n     rolled back\"\n);\n\
                  let sql = \"SELECT key, state FROM t WHERE state = 'in_progress' AND x IS NULL\";\n\
                  let s = \"-- evict: a range of the expiry index\\nDELETE FROM {table} WHERE k = $1\";\n\
                  let t = \"timestamp without time zone\";\n\
                  let c = '\"'; // a comment with several words in it\n\
                  #[cfg(test)]\nmod tests {\n    const S: &str = \"words a test may use\";\n}\n\
                  let n = format!(\"{}.{}\", a, b);\n";
    let found = sentences_in("x.rs", sample);
    assert_eq!(
        found,
        [
            "x.rs:1: \"failed to read the key\"",
            "x.rs:2: \"table {t} has no column {c}\"",
            "x.rs:4: \"the batch was rolled back\"",
        ],
        "{sample}"
    );
}

/// The wording modules of failures and refusals: every fixed piece of their words (the text
/// between a literal's `{}` placeholders, at least [`FAILURE_PIECE`] characters) is asserted
/// exactly by some test, as [`asserted_exactly`] judges, unless [`UNPROVOKED`] lists it with why no
/// input reaches it.
const FAILURE_MODULES: &[&str] = &["db.rs", "errors.rs", "prometheus.rs", "reasons.rs"];

/// How long a piece of words must be to count (shorter ones are joins such as "`, found ").
const FAILURE_PIECE: usize = 12;

/// Failure words no input can provoke, with the reason: these stay worded (a bug, if one ever
/// showed, must still read as one line), but no test can make them appear.
const UNPROVOKED: &[(&str, &str)] = &[
    (
        "set up the session for the final count",
        "evict's counts of what a run left are figures of its summary: a failed count leaves them \
         unknown (null), the run ends as it would have (evict_steps::\
         evict_whose_final_counts_break_reports_them_unknown)",
    ),
    (
        "count the backlog left",
        "evict's counts of what a run left are figures of its summary: a failed count leaves them \
         unknown (null), the run ends as it would have (evict_steps::\
         evict_whose_final_counts_break_reports_them_unknown)",
    ),
    (
        "count the expired in_progress keys left",
        "evict's counts of what a run left are figures of its summary: a failed count leaves them \
         unknown (null), the run ends as it would have (evict_steps::\
         evict_whose_final_counts_break_reports_them_unknown)",
    ),
    (
        "read the walked index's size",
        "check's measure of evict's walk leaves out a figure it cannot read, never failing on it; \
         a lost connection then fails check's next read",
    ),
    (
        "cannot build the connection pool: ",
        "deadpool's builder fails only for timeouts set without a runtime (NoRuntimeSpecified), \
         and the pool always names tokio's runtime with its timeouts",
    ),
    (
        "the batch statement returned no row",
        "a reclaim sweep batch's statement ends in an aggregate without GROUP BY (count and \
         array_agg over the keys it took), which answers one row, also when it took none",
    ),
    (
        "failed to encode the plan",
        "a plan's fields all encode: numbers (serde_json writes a non-finite one as null), \
         strings, JSON values, and instants through report::timestamp, which has a form for every \
         year an instant can hold",
    ),
    (
        "read a listed key",
        "the preview reads every column as optional but the key and the age, and lists only rows \
         that have a key and whose hold began before the cutoff, so both are there",
    ),
    (
        "read the keys the batch took",
        "a sweep batch answers the keys it took as a text array, and takes only rows that have a \
         key; the tenants are read as optional",
    ),
    (
        "failed to listen for SIGTERM",
        "tokio makes its signal socket pair when the runtime starts (room for it is checked first, \
         hostile.rs); a listener added later fails only for a signal that may not be caught",
    ),
    ("failed to listen for SIGINT", "as for SIGTERM"),
    (
        "a statement that returns one row returned ",
        "the statements db::evict reads through one_row (a batch, the claim of a range, a page of \
         the walk, the counts, the ping) each end in an aggregate without GROUP BY or a SELECT of \
         expressions, which answers exactly one row whatever the table holds",
    ),
    (
        "evict's SKIP LOCKED statement has no form that finds its rows by the key's identity",
        "the SKIP LOCKED template has the ctid form rows_by_identity rewrites, and the EXPLAIN \
         test rewrites it (expecting that form) and plans the result",
    ),
    (
        "a reclaim statement has no form that finds its rows by the key's identity",
        "every reclaim template has the ctid form rows_by_identity rewrites, and the EXPLAIN \
         test rewrites each (expecting that form) and plans the result",
    ),
    (
        "a batch of plan rows has no statement for the NULLs of their scopes",
        "a plan's rows are grouped by which scope columns are NULL before they are batched, and \
         an apply form is built for each pattern that occurs; a NULL on a NOT NULL column is \
         refused before any change (exit 2)",
    ),
    (
        "the apply statement answered for ",
        "the apply statements answer one row per plan row: a LEFT JOIN from the unnest of the \
         batch's rows",
    ),
    (
        "the batch raced another session and was rolled back",
        "a Rerun is always tried again; after the last try the archived batch's own words \
         replace it (the next entry)",
    ),
    (
        "an archived batch kept taking keys other than those it locked; it was rolled back",
        "needs another session to commit a new matching key between the batch's lock and change \
         statements (under a millisecond apart) on every one of its tries in a row; no test can \
         time that",
    ),
    (
        "SSL connection was established with unexpected ALPN protocol",
        "idemctl offers only \"postgresql\", and OpenSSL's client aborts the handshake itself \
         (\"bad extension\") when a server picks a protocol it was not offered, before idemctl's \
         check runs (conn_words.rs proves it)",
    ),
    (
        "cannot use sslcrldir \"",
        "OpenSSL refuses a CRL directory only when its name is empty or memory runs out; the \
         path has already been found to be a directory",
    ),
    (
        "no host to connect to",
        "every connection string yields at least one endpoint (a default socket directory when \
         none is named), and a resolved name has at least one address",
    ),
    (
        "connection timed out",
        "the text of an I/O error of kind TimedOut, which the pool words by its kind as \
         \"timed out after ...\" before any line prints it",
    ),
];

/// The fixed pieces of `text`'s literals outside its unit tests, at least `min` characters long.
fn fixed_pieces(text: &str, min: usize) -> Vec<String> {
    let text = without_unit_tests(text);
    let mut out = Vec::new();
    for lit in literals_of(&text) {
        let lit = without_continuations(&lit).replace("\\\"", "\"");
        for p in between_placeholders(&lit) {
            if p.trim().chars().count() >= min && p.contains(' ') && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Whether `piece` is written out whole in a test file that asserts words exactly
/// (`assert_error(`, `assert_stderr(` or `assert_eq!`), and not as a partial match: no
/// `contains(`, `starts_with(` or `ends_with(` in the 200 characters before it. So a table of cases,
/// each asserted whole in a loop or by a helper, counts.
fn written_out_in_an_exact_test(files: &[String], piece: &str) -> bool {
    files.iter().any(|text| {
        let exact = text.contains("assert_error(")
            || text.contains("assert_stderr(")
            || text.contains("assert_eq!");
        exact
            && text.match_indices(piece).any(|(at, _)| {
                let mut from = at.saturating_sub(200);
                while !text.is_char_boundary(from) {
                    from += 1;
                }
                let near = &text[from..at];
                !["contains(", "starts_with(", "ends_with("]
                    .iter()
                    .any(|p| near.contains(p))
            })
    })
}

#[test]
fn every_failure_word_is_asserted_exactly_or_listed_as_unprovoked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut test_files = Vec::new();
    rust_files(&root.join("tests"), &mut test_files);
    test_files.sort();
    let files: Vec<String> = test_files
        .iter()
        .filter(|f| !f.ends_with("layers.rs"))
        .map(|f| without_continuations(&std::fs::read_to_string(f).unwrap()).replace("\\\"", "\""))
        .collect();
    let tests = files.join("\n");
    let mut unasserted = Vec::new();
    let mut seen = 0;
    for m in FAILURE_MODULES {
        let text = std::fs::read_to_string(root.join("src/output").join(m)).unwrap();
        for piece in fixed_pieces(&text, FAILURE_PIECE) {
            seen += 1;
            let asserted =
                asserted_exactly(&tests, &piece) || written_out_in_an_exact_test(&files, &piece);
            if !asserted && !UNPROVOKED.iter().any(|(p, _)| *p == piece) {
                unasserted.push(format!("{m}: {piece:?}"));
            }
        }
    }
    assert!(seen > 100, "found only {seen} pieces");
    let stale: Vec<_> = UNPROVOKED
        .iter()
        .filter(|(p, _)| asserted_exactly(&tests, p) || written_out_in_an_exact_test(&files, p))
        .map(|(p, _)| *p)
        .collect();
    assert!(
        stale.is_empty(),
        "asserted exactly now, take them off UNPROVOKED: {stale:?}"
    );
    assert!(
        unasserted.is_empty(),
        "{} of {seen} failure words are asserted exactly by no test (assert_error / assert_stderr \
         / assert_eq!); provoke each in a real run, or list it in UNPROVOKED with why no input \
         reaches it:\n{}",
        unasserted.len(),
        unasserted.join("\n")
    );
}
