//! Prometheus text exposition format (the classic format node_exporter's textfile collector and the
//! Pushgateway read), label validation and escaping, and atomic writing of a textfile (temporary
//! file in the same directory, fsync, rename).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};

/// Metric kinds idemctl emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
}

/// One metric: HELP, TYPE and its samples, each with the labels that tell it apart.
#[derive(Clone, Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// A set of metrics, each family written once (HELP, TYPE, samples), in the order first added.
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics {
    families: Vec<Family>,
}

impl Metrics {
    /// Add one sample; `labels` are (name, value) pairs beyond the run's common labels. A sample
    /// of a metric already added joins its family.
    pub(crate) fn add(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        match self.families.iter_mut().find(|f| f.name == name) {
            Some(f) => f.samples.push((labels, value)),
            None => self.families.push(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                kind,
                samples: vec![(labels, value)],
            }),
        }
    }

    /// Append every family of `other`.
    pub(crate) fn extend(&mut self, other: Metrics) {
        for f in other.families {
            for (labels, value) in f.samples {
                let l: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                self.add(&f.name, &f.help, f.kind, &l, value);
            }
        }
    }

    /// Drop a metric (every sample of it).
    pub(crate) fn remove(&mut self, name: &str) {
        self.families.retain(|f| f.name != name);
    }

    /// The exposition text, every sample carrying `common` labels first (ends with a newline, as
    /// the format requires).
    pub(crate) fn render(&self, common: &[(String, String)]) -> String {
        let mut text = String::new();
        for f in &self.families {
            let kind = match f.kind {
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(text, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(text, "# TYPE {} {kind}", f.name);
            for (labels, value) in &f.samples {
                let all: Vec<(&str, &str)> = common
                    .iter()
                    .chain(labels)
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let _ = writeln!(
                    text,
                    "{}{} {}",
                    f.name,
                    render_labels(&all),
                    render_value(*value)
                );
            }
        }
        text
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Escape a label value: backslash, double quote and line feed, as the text format requires.
pub(crate) fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Labels idemctl sets itself (or Prometheus and the Pushgateway do), which `--label` may not use.
pub(crate) const RESERVED_LABELS: [&str; 9] = [
    "database",
    "table",
    "reason",
    "action",
    "job",
    "instance",
    "le",
    "quantile",
    "exported_job",
];

/// Check a label name given on the command line: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`
/// (reserved by Prometheus), not one idemctl sets itself.
pub(crate) fn check_label_name(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "label name {name:?} is not a Prometheus label name (letters, digits and _, not starting with a digit)"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "label name {name:?} starts with __, which Prometheus reserves"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "label name {name:?} is set by idemctl or Prometheus itself; choose another name"
        ));
    }
    Ok(())
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

/// Read one sample's value back from exposition text: the first line of metric `name`.
pub(crate) fn read_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The directory a textfile is written in.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Check, before any change, that `path` can be replaced atomically: its directory exists and
/// takes a new file, and the path is not a directory.
pub(crate) fn check_writable(path: &Path) -> std::result::Result<(), String> {
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(format!(
            "directory {} does not exist; create it or point --textfile elsewhere",
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!(
            "{} is a directory; give a file name such as {}/idemctl.prom",
            path.display(),
            path.display()
        ));
    }
    tempfile::Builder::new()
        .prefix(".idemctl-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            format!(
                "cannot create a file in {}: {}",
                dir.display(),
                pathless(&e)
            )
        })
}

/// tempfile's error without the random name it tried (its words say where already): tempfile
/// appends ` at path "..."` to the OS error's words and keeps no other way to the OS error.
fn pathless(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at path \"") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Replace `path` atomically with `contents`: readers see the old file or the new one, never half.
pub(crate) fn write_atomic(path: &Path, contents: &str) -> Result<()> {
    let dir = parent_dir(path);
    let tmp = tempfile::Builder::new()
        .prefix(".idemctl-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| anyhow::anyhow!(pathless(&e)))
        .with_context(|| format!("failed to create a temporary file in {}", dir.display()))?;
    // The file itself, not the wrapper, whose errors name its random path.
    let mut file = tmp.as_file();
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
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
            &[("reason", "a\"b\\c\nd")],
            3.0,
        );
        m.add(
            "idemctl_x_bytes",
            "A\nB",
            Kind::Gauge,
            &[("reason", "e")],
            4.5,
        );
        let common = [("database".to_owned(), "app".to_owned())];
        assert_eq!(
            m.render(&common),
            "# HELP idemctl_x_bytes A\\nB\n# TYPE idemctl_x_bytes gauge\n\
             idemctl_x_bytes{database=\"app\",reason=\"a\\\"b\\\\c\\nd\"} 3\n\
             idemctl_x_bytes{database=\"app\",reason=\"e\"} 4.5\n"
        );
        assert_eq!(read_value(&m.render(&common), "idemctl_x_bytes"), Some(3.0));
        assert_eq!(read_value(&m.render(&common), "idemctl_x"), None);
    }

    #[test]
    fn label_names_are_checked() {
        assert!(check_label_name("cluster").is_ok());
        assert!(check_label_name("_env2").is_ok());
        assert!(check_label_name("2env").is_err());
        assert!(check_label_name("env-name").is_err());
        assert!(check_label_name("").is_err());
        assert!(check_label_name("__name__").is_err());
        assert!(check_label_name("database").is_err());
        assert!(check_label_name("job").is_err());
    }

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.prom");
        check_writable(&p).unwrap();
        write_atomic(&p, "a 1\n").unwrap();
        write_atomic(&p, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(check_writable(&dir.path().join("none/m.prom")).is_err());
        assert!(check_writable(dir.path()).is_err());
    }
}
