//! `reclaim --archive FILE`: every key reclaim takes (a sweep's, or an apply's of a plan), appended
//! as one JSON line with its whole record before the change, written and fsynced before the batch
//! that takes it commits.
//!
//! Line format (one JSON object per line):
//! * a key: `{"type": "key", "batch": "<pid>-<n>", "at": <database time of the batch>,
//!   "action": "delete"|"fail"|"release", "reason": ..., "older_than_seconds": ..., ["plan":
//!   <the plan file, apply only>,] ["filter": {"api_key_id"|"path"|"method": ...},] "committed":
//!   "unknown", "api_key_id": ..., "key": ..., "record": {<every column, as before the change>}}`.
//!   `committed` is "unknown" because the line is made durable before the commit: a run killed
//!   between the two leaves a line for a key whose batch rolled back (the key is still in the
//!   table, unchanged).
//! * after the batch commits: `{"type": "commit", "batch": "<pid>-<n>", "keys": N}` (fsynced too).
//!   A key line whose batch has no commit line may describe a key that was not reclaimed.
//!
//! The file is opened for appending (created if missing, mode 0600) before anything changes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

use crate::db::reclaim::ArchivedKey;
use crate::exit::{Exit, fail};
use crate::output::rfc3339;
use crate::report::rows::Filter;

/// Why the run takes its keys, for each key line.
pub struct Why<'a> {
    pub action: &'a str,
    pub older_than: f64,
    pub filter: &'a Filter,
}

/// An open archive.
pub struct Archive {
    path: PathBuf,
    /// The plan an apply takes its keys from (None for a sweep).
    plan: Option<String>,
    file: File,
    batches: u64,
    /// Key lines written.
    pub keys: u64,
}

impl Archive {
    /// Open `path` for appending before any change; a path that cannot be opened is a usage error.
    /// `plan`: the plan file an apply reclaims from.
    pub fn open(path: &Path, plan: Option<&Path>) -> Result<Archive> {
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options.open(path).map_err(|e| {
            fail(
                Exit::Usage,
                crate::output::reclaim::archive_unopened(path, &e),
            )
        })?;
        Ok(Archive {
            path: path.to_owned(),
            plan: plan.map(|p| p.display().to_string()),
            file,
            batches: 0,
            keys: 0,
        })
    }

    /// Append a batch's keys and make them durable; returns the batch's id.
    pub fn write_keys(&mut self, why: &Why<'_>, keys: &[ArchivedKey]) -> Result<String> {
        self.batches += 1;
        let batch = format!("{}-{}", std::process::id(), self.batches);
        let older_than = why.older_than;
        let reason = match &self.plan {
            None => format!("in_progress, held longer than --older-than ({older_than}s)"),
            Some(plan) => format!(
                "in the plan {plan}, unchanged since, in_progress and held longer than its --older-than ({older_than}s)"
            ),
        };
        let mut buf = Vec::new();
        for k in keys {
            let mut line = json!({
                "type": "key",
                "batch": batch,
                "at": rfc3339(k.at),
                "action": why.action,
                "reason": reason,
                "older_than_seconds": older_than,
            });
            if let Some(plan) = &self.plan {
                line["plan"] = json!(plan);
            }
            if !why.filter.is_empty() {
                line["filter"] = serde_json::to_value(why.filter)?;
            }
            line["committed"] = json!("unknown");
            line["api_key_id"] = json!(k.api_key_id);
            line["key"] = json!(k.key);
            line["record"] = k.record.clone();
            serde_json::to_writer(&mut buf, &line)?;
            buf.push(b'\n');
        }
        self.append(&buf)?;
        self.keys += keys.len() as u64;
        Ok(batch)
    }

    /// Record that a batch committed.
    pub fn write_commit(&mut self, batch: &str, keys: usize) -> Result<()> {
        let mut buf = serde_json::to_vec(&json!({"type": "commit", "batch": batch, "keys": keys}))?;
        buf.push(b'\n');
        self.append(&buf)
    }

    fn append(&mut self, buf: &[u8]) -> Result<()> {
        self.file
            .write_all(buf)
            .and_then(|()| self.file.flush())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| {
                fail(
                    Exit::Failure,
                    crate::output::reclaim::archive_unwritten(&self.path, &e),
                )
            })
    }
}
