//! The layering the code keeps: only `src/db/` knows SQL text and column names. A file under
//! `src/commands/` that holds a statement in a string, embeds a file of `sql/`, or reads a row's
//! column by name fails this test, which names the file, the line and what it found.

use std::path::Path;

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

/// Files of the data layer that still build display text themselves (the Citus layout's
/// description and its shard messages), to move to the output layer like the rest.
const ESCAPING_NOT_YET_MOVED: &[&str] = &["src/db/citus.rs"];

/// Escaping for a terminal belongs to the output layer: `src/db/` and the config file hand out
/// names as the catalog and the file hold them, and a call to the sanitiser there fails this test.
#[test]
fn the_data_layer_and_the_config_file_leave_escaping_to_the_output_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/db"), &mut files);
    files.push(root.join("src/config.rs"));
    files.sort();
    let mut found = Vec::new();
    for f in &files {
        let shown = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if ESCAPING_NOT_YET_MOVED.contains(&shown.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let (_, code) = split_line(line);
            // `KeyTable::display` is the output layer's (escaped) name; db/ says `qualified_name`.
            if ["sanitize", "escape_controls", "table.display()"]
                .iter()
                .any(|m| code.contains(m))
            {
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
