//! Prometheus text exposition format (the classic format node_exporter's textfile collector reads),
//! and atomic writing of a textfile (temporary file in the same directory, fsync, rename).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};

/// Metric kinds idemctl emits.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Gauge,
}

/// A set of metrics, each with HELP and TYPE written once before its samples.
#[derive(Default)]
pub struct Metrics {
    text: String,
}

impl Metrics {
    /// Add one metric with one sample; `labels` are (name, value) pairs.
    pub fn add(&mut self, name: &str, help: &str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        let kind = match kind {
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        let _ = writeln!(
            self.text,
            "{name}{} {}",
            render_labels(labels),
            render_value(value)
        );
    }

    /// The exposition text (ends with a newline, as the format requires).
    pub fn text(&self) -> &str {
        &self.text
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Escape a label value.
pub fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn render_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Replace `path` atomically with `contents`: readers see the old file or the new one, never half.
pub fn write_atomic(path: &Path, contents: &str) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".idemctl-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("failed to create a temporary file in {}", dir.display()))?;
    tmp.write_all(contents.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("failed to write a temporary file in {}", dir.display()))?;
    set_readable(tmp.as_file());
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("failed to replace {}", path.display()))?;
    Ok(())
}

/// node_exporter usually runs as another user: make the file world-readable like a normal file.
fn set_readable(file: &std::fs::File) {
    use std::os::unix::fs::PermissionsExt;
    let _ = file.set_permissions(std::fs::Permissions::from_mode(0o644));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_help_type_and_escaped_labels() {
        let mut m = Metrics::default();
        m.add(
            "idemctl_x_bytes",
            "A\nB",
            Kind::Gauge,
            &[("table", "a\"b")],
            3.0,
        );
        assert_eq!(
            m.text(),
            "# HELP idemctl_x_bytes A\\nB\n# TYPE idemctl_x_bytes gauge\nidemctl_x_bytes{table=\"a\\\"b\"} 3\n"
        );
    }

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.prom");
        write_atomic(&p, "a 1\n").unwrap();
        write_atomic(&p, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
