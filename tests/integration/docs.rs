//! The documentation holds: every example of the README, the guide (`docs/`), `--help` and the man
//! page parses as idemctl parses it, and the README's and the guide's `sh` examples run as written
//! against a test database; the environment variables the README and the man page list are the
//! ones the binary reads; the shells the README names are the ones `completions` takes; --help
//! shows no variable's value.
//!
//! A page joins the examples test with one line in [`PAGES`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::fixtures::{Mix, Schema, table_with};
use crate::support::{Cmd, Run, TestDb};

/// The pages whose ```sh examples run as written.
const PAGES: &[&str] = &[
    "README.md",
    "docs/connecting.md",
    "docs/evict.md",
    "docs/reclaim.md",
    "docs/inspect.md",
    "docs/stats.md",
    "docs/check.md",
    "docs/metrics.md",
    "docs/unattended.md",
    "docs/performance.md",
    "docs/development.md",
    "docs/profiles.md",
    "docs/reliability.md",
    "docs/top.md",
];

/// Whether an example only parses here, and where it runs instead: the live view needs a terminal
/// (tests/integration/top.rs drives it in tmux), and a configuration file's examples need the
/// file and its table (tests/integration/config_file.rs runs them as docs/profiles.md prints them).
fn runs_elsewhere(example: &Example) -> bool {
    let words = &example.words;
    let live_view = words.iter().any(|w| w == "top") && !words.iter().any(|w| w == "--once");
    let config = words.iter().any(|w| w == "--config")
        || example.env.iter().any(|(k, _)| k == "IDEMCTL_CONFIG");
    live_view || config
}

/// Programs other than idemctl that examples name, and whether this test runs them.
const OTHER_PROGRAMS: &[(&str, bool)] = &[
    ("cargo", false),
    ("bash", false),
    ("scripts/demo", false),
    ("scripts/test", false),
    ("scripts/pg-matrix", false),
    ("scripts/pgtmp", false),
    ("scripts/citus", false),
    ("promtool", true),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(page: &str) -> String {
    std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// One example: where it is, the words of its command (an `&&` list is several), and the
/// variables it sets before the program (`VAR=value cmd`) or in an earlier `export`.
#[derive(Debug, Clone)]
struct Example {
    at: String,
    env: Vec<(String, String)>,
    words: Vec<String>,
    /// The directory an earlier `cd` in the same line moved to.
    dir: Option<String>,
}

/// The ```sh blocks of a Markdown page, as (first line number, text).
fn sh_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```sh" => current = Some((n + 2, String::new())),
            Some(_) if line.trim_start() == "```" => blocks.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Split a line of shell into words: quotes, backslashes and comments as sh reads them, `&&`
/// and `>` as words of their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                words.push("&&".to_owned());
            }
            '>' | '|' | ';' => panic!("{line}: an example with {c} cannot run as written here"),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The commands of a page's ```sh blocks: a line ending in `\` continues on the next, `export`
/// sets a variable for the commands after it in the block.
fn examples(page: &str) -> Vec<Example> {
    let mut out = Vec::new();
    for (first, block) in sh_blocks(&read(page)) {
        let mut exported: Vec<(String, String)> = Vec::new();
        let mut pending = String::new();
        for (i, line) in block.lines().enumerate() {
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head);
                continue;
            }
            pending.push_str(line);
            let words = shell_words(&std::mem::take(&mut pending));
            let at = format!("{page}:{}", first + i);
            if words.first().is_some_and(|w| w == "export") {
                for w in &words[1..] {
                    let (k, v) = w.split_once('=').expect("export VAR=value");
                    exported.push((k.to_owned(), v.to_owned()));
                }
                continue;
            }
            let mut dir = None;
            for part in words.split(|w| w == "&&").filter(|p| !p.is_empty()) {
                if part[0] == "cd" {
                    dir = part.get(1).cloned();
                    continue;
                }
                let mut env = exported.clone();
                let mut rest = part;
                while let Some((k, v)) = rest.first().and_then(|w| w.split_once('='))
                    && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                {
                    env.push((k.to_owned(), v.to_owned()));
                    rest = &rest[1..];
                }
                out.push(Example {
                    at: at.clone(),
                    env,
                    words: rest.to_vec(),
                    dir: dir.clone(),
                });
            }
        }
    }
    out
}

/// The test database the examples run against: the storage table with expired, live and stuck
/// keys, the optional in_progress index (reclaim's examples need it), and the keys the examples
/// name (`8e0f0c2a-3b7d` of tenant `t42`), in flight for a minute (younger than
/// reclaim's threshold, so the reclaim examples leave them for inspect's).
async fn example_db() -> TestDb {
    let db = TestDb::new().await;
    table_with(
        &db,
        Schema::Corrected,
        Mix {
            expired: 300,
            live: 100,
            fresh: 3,
            stuck: 6,
            expired_in_progress: 2,
        },
    )
    .await;
    db.exec(include_str!("../../sql/maintenance_indexes.sql"))
        .await;
    db.exec(
        "INSERT INTO idempotency_keys (key, api_key_id, request_method, request_path, \
         request_fingerprint, state, locked_at, created_at, expires_at) \
         SELECT '8e0f0c2a-3b7d', t, 'POST', '/v1/payments', sha256('{}'::bytea), 'in_progress', \
         now() - interval '1 minute', now() - interval '1 minute', now() + interval '1 day' \
         FROM unnest(ARRAY['t42']) AS t",
    )
    .await;
    db
}

/// Run one idemctl example as written, in `dir`, with the test database as its connection and
/// any absolute path under /var/ taken to the same path under `dir`.
fn run_idemctl(db: &TestDb, example: &Example, dir: &Path) -> Run {
    let args: Vec<String> = example.words[1..]
        .iter()
        .map(|w| match w.strip_prefix("/var/") {
            Some(rest) => {
                let path = dir.join("var").join(rest);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                path.to_str().unwrap().to_owned()
            }
            None => w.clone(),
        })
        .collect();
    let mut cmd = Cmd::new().current_dir(dir);
    for (k, v) in &example.env {
        if k != "IDEMCTL_DATABASE_URL" && k != "DATABASE_URL" {
            cmd = cmd.env(k, v);
        }
    }
    let run = cmd.env("IDEMCTL_DATABASE_URL", db.url()).args(&args).run();
    if run.code != 2
        || !run
            .stderr
            .contains("without confirmation: there is no terminal")
    {
        return run;
    }
    // An example that asks for confirmation is written for a terminal: run it on one, and answer.
    let line = std::iter::once(crate::support::IDEMCTL.to_owned())
        .chain(args)
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Cmd::of("script").current_dir(dir);
    for (k, v) in &example.env {
        if k != "IDEMCTL_DATABASE_URL" && k != "DATABASE_URL" {
            cmd = cmd.env(k, v);
        }
    }
    cmd.env("IDEMCTL_DATABASE_URL", db.url())
        .args(["-qec", &line, "/dev/null"])
        .stdin_bytes("y\n")
        .run()
}

fn parses(words: &[String]) -> Result<(), String> {
    idemctl::check_args(words)
}

/// Every idemctl example of every page parses; each runs against the test database (every page's
/// in order, so an example's files, such as a plan, are there for the next) and ends as a run
/// that did its work: exit 0, or 4 when check reports a problem or inspect a mismatch. The other
/// programs the examples name exist, and promtool's examples run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sh_example_of_the_readme_and_the_guide_runs_as_written() {
    let db = example_db().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("request.json"), "{}").unwrap();
    let mut ran = 0;
    for page in PAGES {
        for example in examples(page) {
            let program = example.words[0].as_str();
            if program == "idemctl" {
                if let Err(e) = parses(&example.words) {
                    panic!("{}: {}: {e}", example.at, example.words.join(" "));
                }
                if runs_elsewhere(&example) {
                    continue;
                }
                let run = run_idemctl(&db, &example, dir.path());
                assert!(
                    [0, 4].contains(&run.code),
                    "{}: {}\n{run}",
                    example.at,
                    example.words.join(" ")
                );
                ran += 1;
                continue;
            }
            let Some((_, runs)) = OTHER_PROGRAMS.iter().find(|(p, _)| *p == program) else {
                panic!(
                    "{}: {program}: neither idemctl nor a program this test knows (OTHER_PROGRAMS)",
                    example.at
                );
            };
            if program.starts_with("scripts/") {
                assert!(
                    repo().join(program).is_file(),
                    "{}: {program} does not exist",
                    example.at
                );
            }
            if *runs {
                let cwd = repo().join(example.dir.as_deref().unwrap_or("."));
                let run = Cmd::of(program)
                    .current_dir(cwd)
                    .args(&example.words[1..])
                    .run();
                run.assert_success();
            }
        }
    }
    assert!(ran > 20, "only {ran} idemctl examples ran");
}

/// The examples idemctl's --help and man page show: each line's text from `idemctl ` on (after a
/// cron schedule or an `ExecStart=`), up to a redirection, each side of `&&` on its own.
fn help_examples(text: &str, commands: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        // The synopsis, with its \fI placeholders, is no example.
        // nor is the list of commands (`\fBidemctl inspect\fR` on a line of its own), nor a usage line.
        if line.contains("\\fI") || line.starts_with("\\fB") || line.starts_with("Usage:") {
            continue;
        }
        let line = line
            .replace("\\-", "-")
            .replace("\\fB", "")
            .replace("\\fR", "");
        let Some(at) = line.find("idemctl ") else {
            continue;
        };
        // Prose that names idemctl (`idemctl check` says which) is not an example line.
        let head = &line[..at];
        let example = head.trim().is_empty()
            || head.trim_end().ends_with(':')
            || head.ends_with("ExecStart=/usr/local/bin/")
            || head.trim_start().starts_with("*/5 * * * *")
            || head.ends_with(".B ");
        if !example {
            continue;
        }
        // A line may chain examples (`a && b`, or a list `a; b; c.` in prose).
        let text = line[at..].split(" > ").next().unwrap();
        for part in text.split(" && ").flat_map(|p| p.split("; ")) {
            let part = part.trim();
            // An example goes on with a command or an option; prose that names idemctl
            // (`idemctl owns each server session`, the NAME line's `idemctl - ...`) does not.
            let Some(part) = part.strip_prefix("idemctl ").filter(|p| {
                p.starts_with("--")
                    || p.starts_with("-o ")
                    || p.starts_with("-d ")
                    || commands
                        .iter()
                        .any(|c| p.split(' ').next() == Some(c.as_str()))
            }) else {
                continue;
            };
            let part = part.split(". ").next().unwrap().trim_end_matches('.');
            let words = shell_words(&format!("idemctl {part}"));
            if words.len() > 1 {
                out.push(words);
            }
        }
    }
    out
}

#[test]
fn every_example_of_help_and_the_man_page_parses() {
    let mut texts = vec![Cmd::new().arg("man").run().stdout];
    let help = Cmd::new().arg("--help").run().stdout;
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 6, "{help}");
    texts.push(help);
    for c in &commands {
        texts.push(Cmd::new().args([c.as_str(), "--help"]).run().stdout);
    }
    let mut seen = 0;
    for text in &texts {
        for words in help_examples(text, &commands) {
            // Placeholders in capitals (KEY, TENANT) stand for values; they parse as values.
            if let Err(e) = parses(&words) {
                panic!("{}: {e}", words.join(" "));
            }
            seen += 1;
        }
    }
    assert!(seen > 15, "only {seen} examples found");
}

/// The environment variables the binary reads: every string literal of its source (tests left
/// out) that names an IDEMCTL_ or PG variable, DATABASE_URL or NO_COLOR.
fn variables_read() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("tests.rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo().join("src"), &mut files);
    let mut vars = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for literal in code.split('"').skip(1).step_by(2) {
            if is_variable(literal) {
                vars.insert(literal.to_owned());
            }
        }
    }
    vars
}

fn is_variable(s: &str) -> bool {
    (s.starts_with("IDEMCTL_") || s.starts_with("PG") || s == "DATABASE_URL" || s == "NO_COLOR")
        && s.len() > 3
        && s.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// The variables named in `text` (words in backticks, or separated by commas and blanks).
fn variables_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| is_variable(w))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_and_the_man_page_list_the_variables_the_binary_reads() {
    let binary = variables_read();
    for v in [
        "IDEMCTL_CONFIG",
        "IDEMCTL_PROFILE",
        "IDEMCTL_TTL",
        "IDEMCTL_POOL_MODE",
    ] {
        assert!(binary.contains(v), "the source scan misses {v}: {binary:?}");
    }
    for v in ["IDEMCTL_PUSHGATEWAY", "PGSERVICE", "PGHOST", "DATABASE_URL"] {
        assert!(binary.contains(v), "the source scan misses {v}: {binary:?}");
    }
    let man = Cmd::new().arg("man").run().stdout;
    let environment = man
        .split(".SH ENVIRONMENT\n")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .expect("the man page has an ENVIRONMENT section");
    let listed: BTreeSet<String> = environment
        .lines()
        .filter_map(|l| l.strip_prefix(".B "))
        .flat_map(variables_in)
        .collect();
    assert_eq!(
        listed, binary,
        "the man page's ENVIRONMENT against the source"
    );
    let readme = read("README.md");
    let section = readme
        .split("\n## Environment\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Environment section");
    assert_eq!(
        variables_in(section),
        binary,
        "README's Environment against the source"
    );
}

#[test]
fn the_readme_names_the_shells_completions_takes() {
    let help = Cmd::new().args(["completions", "--help"]).run().stdout;
    let values = help
        .split("[possible values: ")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("completions --help lists its shells");
    let mut shells: Vec<&str> = values.split(", ").collect();
    shells.sort_unstable();
    let readme = read("README.md");
    let line = readme
        .lines()
        .find(|l| l.contains("idemctl completions SHELL"))
        .expect("README says how to get completions");
    let at = readme.find(line).unwrap();
    let sentence = &readme[at..readme[at..].find(".\n").map_or(readme.len(), |e| at + e)];
    let flat = sentence.split_whitespace().collect::<Vec<_>>().join(" ");
    let named = flat
        .split("completions for ")
        .nth(1)
        .expect("README names the shells");
    let mut named: Vec<&str> = named
        .split([',', ' '])
        .filter(|w| !w.is_empty() && *w != "or" && *w != "and")
        .collect();
    named.sort_unstable();
    assert_eq!(named, shells, "{flat}");
}

/// A variable's value never shows in --help: not an empty one, not a URL with a password.
#[test]
fn help_shows_no_variable_value() {
    let help = Cmd::new()
        .env("IDEMCTL_POOL_MODE", "")
        .env("IDEMCTL_PUSHGATEWAY", "http://user:s3cret@gateway:9091")
        .env("IDEMCTL_DATABASE_URL", "postgresql://u:pw-in-url@db/app")
        .args(["evict", "--help"])
        .run();
    help.assert_success();
    for secret in ["s3cret", "pw-in-url", "=]"] {
        assert!(!help.stdout.contains(secret), "{secret}: {help}");
    }
    assert!(help.stdout.contains("[env: IDEMCTL_POOL_MODE]"), "{help}");
}

#[test]
fn shell_words_reads_quotes_comments_and_continuations() {
    assert_eq!(
        shell_words("idemctl --ttl 24h check   # a comment"),
        ["idemctl", "--ttl", "24h", "check"]
    );
    assert_eq!(
        shell_words("export A='x y' B=\"a\\\"b\""),
        ["export", "A=x y", "B=a\"b"]
    );
    assert_eq!(
        shell_words("cd d && promtool test"),
        ["cd", "d", "&&", "promtool", "test"]
    );
    assert_eq!(shell_words("a#b"), ["a#b"]);
}
