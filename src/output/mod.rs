//! Rendering reports: a table on a terminal, plain `name: value` lines when piped, JSON on request.
//!
//! Commands return typed reports; a module here per command (check, evict, inspect, reclaim,
//! stats, top's live view, and citus for the Citus parts of check, evict and stats) renders each as a [`Doc`] for
//! people, and the report itself is the JSON for scripts. Nothing else prints data.

pub(crate) mod check;
pub(crate) mod citus;
pub(crate) mod db;
pub(crate) mod errors;
pub(crate) mod evict;
pub(crate) mod inspect;
pub(crate) mod json_text;
pub(crate) mod names;
pub(crate) mod prometheus;
pub(crate) mod reasons;
pub(crate) mod reclaim;
mod sanitize;
pub(crate) mod stats;
pub(crate) mod top;

use std::io::{IsTerminal, Write};

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, ContentArrangement, Table};

use crate::domain::{ColorChoice, OutputFormat};
use crate::report::rows::Scope;

pub(crate) use crate::domain::human_secs;
pub(crate) use sanitize::{escape_controls, escape_lines, sanitize};

/// One block of human-readable output.
#[derive(Debug, Clone)]
pub(crate) enum Block {
    /// Labelled values, one per line.
    Fields {
        title: Option<String>,
        rows: Vec<(String, String)>,
    },
    /// A table with a header row.
    Rows {
        title: Option<String>,
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// Free text (already sanitised by the caller where it holds untrusted data).
    Text(String),
    /// JSON text as stored (untrusted): shown indented under its title, every number and escape
    /// exactly as stored, terminal controls escaped once here.
    Json { title: String, text: String },
}

/// A human-readable document: a sequence of blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Doc {
    pub blocks: Vec<Block>,
}

impl Doc {
    /// Add a block of labelled values.
    pub(crate) fn fields(&mut self, title: Option<&str>, rows: Vec<(String, String)>) {
        self.blocks.push(Block::Fields {
            title: title.map(str::to_owned),
            rows,
        });
    }

    /// Add a table.
    pub(crate) fn rows<S: AsRef<str>>(
        &mut self,
        title: Option<&str>,
        header: &[S],
        rows: Vec<Vec<String>>,
    ) {
        self.blocks.push(Block::Rows {
            title: title.map(str::to_owned),
            header: header.iter().map(|h| h.as_ref().to_owned()).collect(),
            rows,
        });
    }

    /// Add free text.
    pub(crate) fn text(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Text(text.into()));
    }

    /// Add stored JSON text under a title.
    pub(crate) fn json(&mut self, title: &str, text: impl Into<String>) {
        self.blocks.push(Block::Json {
            title: title.to_owned(),
            text: text.into(),
        });
    }
}

/// Resolved output settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub format: OutputFormat,
    pub color: bool,
    pub quiet: bool,
    pub stdout_tty: bool,
    pub stderr_tty: bool,
}

impl Output {
    /// Decide the format and colour once, from flags, NO_COLOR or TERM=dumb (`no_color`) and
    /// terminal detection.
    pub(crate) fn new(
        format: OutputFormat,
        color: ColorChoice,
        quiet: bool,
        no_color: bool,
    ) -> Output {
        let stdout_tty = std::io::stdout().is_terminal();
        let stderr_tty = std::io::stderr().is_terminal();
        let color = match color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stdout_tty && !no_color,
        };
        let format = match format {
            OutputFormat::Auto if stdout_tty => OutputFormat::Table,
            OutputFormat::Auto => OutputFormat::Plain,
            f => f,
        };
        Output {
            format,
            color,
            quiet,
            stdout_tty,
            stderr_tty,
        }
    }

    /// A note for the operator on stderr (`idemctl: note: ...`), unless `--quiet`.
    pub(crate) fn note(&self, message: &str) {
        if !self.quiet {
            say(format_args!("idemctl: note: {}", escape_controls(message)));
        }
    }

    /// Whether progress may be drawn (attended terminal, not quiet, not machine output).
    pub(crate) fn progress_allowed(&self) -> bool {
        self.stderr_tty
            && !self.quiet
            && !matches!(self.format, OutputFormat::Json | OutputFormat::Prometheus)
    }

    /// Print a report: JSON as given, otherwise the document as a table or plain text (nothing at
    /// all with `--quiet`, unless machine-readable output was asked for).
    pub(crate) fn emit(&self, doc: &Doc, json: &serde_json::Value) -> std::io::Result<()> {
        self.emit_with_raw(doc, json, &[])
    }

    /// [`Output::emit`] for a report in which some JSON members are stored JSON text, kept exact:
    /// `json` holds [`json_text::raw_placeholder`]`(n)` where `raws[n]` goes.
    pub(crate) fn emit_with_raw(
        &self,
        doc: &Doc,
        json: &serde_json::Value,
        raws: &[Option<&str>],
    ) -> std::io::Result<()> {
        if self.quiet && !matches!(self.format, OutputFormat::Json | OutputFormat::Prometheus) {
            return Ok(());
        }
        let text = match self.format {
            OutputFormat::Json if raws.is_empty() => {
                let mut s = serde_json::to_string_pretty(json).map_err(std::io::Error::other)?;
                s.push('\n');
                s
            }
            OutputFormat::Json => json_text::document(json, raws),
            OutputFormat::Table => render_table(doc, self.color),
            _ => render_plain(doc),
        };
        write_stdout(&text)
    }
}

/// Write to stdout; a closed pipe (`idemctl stats | head -1`) is not an error.
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// Plain text: `label: value` lines, tables as tab-separated rows, blank line between blocks.
pub(crate) fn render_plain(doc: &Doc) -> String {
    let mut out = String::new();
    for (n, block) in doc.blocks.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        match block {
            Block::Fields { title, rows } => {
                if let Some(t) = title {
                    out.push_str(&format!("{t}\n"));
                }
                let width = rows
                    .iter()
                    .map(|(k, _)| k.chars().count())
                    .max()
                    .unwrap_or(0);
                // A value of several lines continues under its first line.
                let indent = format!("\n{:width$}  ", "");
                for (k, v) in rows {
                    out.push_str(&format!("{k:<width$}  {}\n", v.replace('\n', &indent)));
                }
            }
            Block::Rows {
                title,
                header,
                rows,
            } => {
                if let Some(t) = title {
                    out.push_str(&format!("{t}\n"));
                }
                out.push_str(&header.join("\t"));
                out.push('\n');
                for r in rows {
                    out.push_str(&r.join("\t"));
                    out.push('\n');
                }
            }
            Block::Text(t) => {
                out.push_str(t);
                if !t.ends_with('\n') {
                    out.push('\n');
                }
            }
            Block::Json { title, text } => out.push_str(&render_json(title, text)),
        }
    }
    out
}

fn render_json(title: &str, text: &str) -> String {
    format!(
        "{title}:\n{}\n",
        json_text::pretty(text, json_text::Escape::Terminal)
    )
}

fn new_table(color: bool) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if !color {
        t.force_no_tty();
    }
    // A pseudo-terminal of unknown or tiny width (`script`, some CI runners) would squeeze every
    // column to one character: lay the table out at its natural width instead.
    if t.width().is_none_or(|w| w < 40) {
        t.set_content_arrangement(ContentArrangement::Disabled);
    }
    t
}

/// Tables drawn with comfy-table, for an attended terminal.
pub(crate) fn render_table(doc: &Doc, color: bool) -> String {
    let mut out = String::new();
    for block in &doc.blocks {
        match block {
            Block::Fields { title, rows } => {
                if let Some(t) = title {
                    out.push_str(&format!("{t}\n"));
                }
                let mut t = new_table(color);
                for (k, v) in rows {
                    t.add_row(vec![Cell::new(k), Cell::new(v)]);
                }
                out.push_str(&format!("{t}\n"));
            }
            Block::Rows {
                title,
                header,
                rows,
            } => {
                if let Some(t) = title {
                    out.push_str(&format!("{t}\n"));
                }
                let mut t = new_table(color);
                t.set_header(header.clone());
                for r in rows {
                    t.add_row(r.clone());
                }
                out.push_str(&format!("{t}\n"));
            }
            Block::Text(s) => {
                out.push_str(s);
                if !s.ends_with('\n') {
                    out.push('\n');
                }
            }
            Block::Json { title, text } => out.push_str(&render_json(title, text)),
        }
    }
    out
}

/// The refusal of `--output prometheus` for a command other than `stats`.
pub(crate) const PROMETHEUS_ONLY_FOR_STATS: &str =
    "--output prometheus is only available for stats; use table, plain or json";

/// The note of a figure (`figure`: "the eviction lag", "would evict") that counts the expired keys
/// a NO ACTION / RESTRICT foreign key `k` still references as if evict could delete them, because
/// they are not probed: on Citus (`citus`) the coordinator's figures never tell them apart while
/// the run leaves them; elsewhere no index leads with the referencing columns, or this role may
/// not read the referencing table. Unescaped, as the JSON carries it; the text report escapes
/// each note.
pub(crate) fn unprobed_reference_note(
    k: &crate::report::rows::ReferencingKey,
    figure: &str,
    citus: bool,
) -> String {
    let why = if citus {
        "on Citus the preview does not tell them apart; the run leaves them and counts them as skipped_referenced"
    } else if k.indexed {
        "this role may not read it, so they are not told apart (see check)"
    } else {
        "no index leads with its referencing columns, so they are not told apart (see check)"
    };
    format!(
        "{figure} includes the expired keys {} ({}) still references ON DELETE {}: {why}",
        k.referencing_table,
        k.columns.join(", "),
        k.on_delete,
    )
}

/// The line of a run whose metrics could not be written: what it did, its end, the file and why.
pub(crate) fn metrics_unwritten(u: &crate::report::run::Unwritten) -> String {
    let did = match u.end.rows {
        Some((rows, what)) => format!("{} ran: {rows} {what}", u.command),
        None => format!("{} ran", u.command),
    };
    format!(
        "{did}, end reason {}; its metrics were not written: {}; the file still holds an earlier \
         run's",
        u.end.reason.as_str(),
        sanitize(&u.why)
    )
}

/// Print a warning on stderr (never suppressed by `--quiet`: warnings are for the operator).
pub(crate) fn warn(message: &str) {
    say(format_args!(
        "idemctl: warning: {}",
        escape_controls(message)
    ));
}

/// Write one line to stderr. A stderr that cannot take it (a full disk, a terminal gone) loses
/// the line, never the run's exit code: `eprintln!` would panic there instead.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(line).and_then(|()| err.write_all(b"\n"));
}

/// An error chain as the one line `idemctl:` prints on stderr: newlines folded, terminal controls
/// escaped (messages carry names and server text as they are; escaping them is this layer's job).
pub(crate) fn error_line(err: &anyhow::Error) -> String {
    escape_controls(&crate::domain::one_line(err))
}

/// Format a byte count with binary units.
pub(crate) fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The leading columns of a table of keys: each scope column by its own name (those of `scope`,
/// the first listed key's scope), then `key`; `key` alone for keys without a scope (a table
/// without a scope column), as inspect shows no scope row for such a key.
pub(crate) fn key_columns(scope: Option<&Scope>, rest: &[&str]) -> Vec<String> {
    scope
        .map(|s| s.0.iter().map(|(c, _)| sanitize(c)).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["key".to_owned()])
        .chain(rest.iter().map(|c| (*c).to_owned()))
        .collect()
}

/// A scope column's value, escaped: `NULL` for a NULL one, and a text that reads NULL in double
/// quotes (`"NULL"`), as PostgreSQL writes an array element, so the two are told apart.
pub(crate) fn scope_value(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_owned(),
        // The empty text, told apart from NULL and from nothing at all.
        Some("") => "\"\"".to_owned(),
        Some(v) if v.eq_ignore_ascii_case("null") => format!("\"{}\"", sanitize(v)),
        Some(v) => sanitize(v),
    }
}

/// The cells of [`key_columns`] for one key, escaped: its value in each of the header's scope
/// columns, then the key (each as [`scope_value`] writes it: a key column that allows NULL may
/// hold it).
pub(crate) fn key_cells(
    header: Option<&Scope>,
    scope: Option<&Scope>,
    key: Option<&str>,
) -> Vec<String> {
    let columns = header.map_or(0, |h| h.0.len());
    (0..columns)
        .map(|i| {
            scope_value(
                scope
                    .and_then(|s| s.0.get(i))
                    .and_then(|(_, v)| v.as_deref()),
            )
        })
        .chain([scope_value(key)])
        .collect()
}

/// A scope in words, each column by its own name: `request_type=payment, client_id=c-42`
/// (escaped; [`scope_value`]).
pub(crate) fn scope_words(scope: &Scope) -> String {
    scope
        .0
        .iter()
        .map(|(c, v)| format!("{}={}", sanitize(c), scope_value(v.as_deref())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A key named with its scope in one phrase: `tenant/key` for a one-column scope, the key with
/// its scope columns named for several (`key k (request_type=payment, client_id=c-42)`), the key
/// alone without a scope.
pub(crate) fn key_label(
    api_key_id: Option<&str>,
    scope: Option<&Scope>,
    key: Option<&str>,
) -> String {
    let key = scope_value(key);
    match (scope, api_key_id) {
        (Some(s), _) if s.0.len() > 1 => format!("key {key} ({})", scope_words(s)),
        (Some(s), _) if let [(_, v)] = s.0.as_slice() => {
            format!("{}/{key}", scope_value(v.as_deref()))
        }
        (_, Some(t)) => format!("{}/{key}", sanitize(t)),
        (_, None) => key,
    }
}

/// Format a timestamp as RFC 3339 (UTC, seconds).
pub(crate) fn rfc3339(ts: time::OffsetDateTime) -> String {
    crate::report::timestamp::second_text(ts)
}

/// A time a key table holds as people read it: [`rfc3339`], or `infinity` / `-infinity` as
/// PostgreSQL spells them.
pub(crate) fn at(t: crate::report::timestamp::Timestamp) -> String {
    t.to_the_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_secs(45.0), "45s");
        assert_eq!(human_secs(3.0 * 3600.0 + 125.0), "3h 2m");
        assert_eq!(human_secs(6.0 * 86_400.0 + 23.0 * 3600.0 + 59.0), "6d 23h");
        assert_eq!(human_secs(7.0 * 86_400.0 + 2.0), "7d");
        assert_eq!(human_secs(2.0), "2s");
        assert_eq!(human_secs(0.2), "0s");
        assert_eq!(human_secs(-90.0), "-1m 30s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn plain_fields_align() {
        let mut d = Doc::default();
        d.fields(
            None,
            vec![("a".into(), "1".into()), ("long".into(), "2".into())],
        );
        assert_eq!(render_plain(&d), "a     1\nlong  2\n");
    }

    #[test]
    fn a_plain_value_of_several_lines_continues_under_its_first_line() {
        let mut d = Doc::default();
        d.fields(
            None,
            vec![
                ("body".into(), "{\n  \"a\": 1\n}".into()),
                ("long".into(), "2".into()),
            ],
        );
        assert_eq!(
            render_plain(&d),
            "body  {\n        \"a\": 1\n      }\nlong  2\n"
        );
    }
}
