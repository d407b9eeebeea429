//! `reclaim --archive FILE`: every key reclaim takes (a sweep's, or an apply's of a plan), appended
//! as one JSON line with its whole record before the change, written and fsynced before the batch
//! that takes it commits.
//!
//! Line format (one JSON object per line):
//! * a key: `{"type": "key", "batch": "<pid>-<n>", "at": <database time of the batch>,
//!   "action": "delete"|"fail"|"release", "reason": ..., "older_than_seconds": ..., ["plan":
//!   <the plan file, apply only>,] ["filter": {"api_key_id"|"path"|"method": ...},] "committed":
//!   "unknown", "api_key_id": ..., "scope": {<each scope column>: <its value>} (null without a
//!   scope), "key": ..., "record": {<every column, as before the change>}}`.
//!   `committed` is "unknown" because the line is made durable before the commit: a run killed
//!   between the two leaves a line for a key whose batch rolled back (the key is still in the
//!   table, unchanged).
//! * after the batch commits: `{"type": "commit", "batch": "<pid>-<n>", "keys": N}` (fsynced too).
//!   A key line whose batch has no commit line may describe a key that was not reclaimed.
//!
//! The file is opened for appending (created if missing, mode 0600) before anything changes. It
//! stays whole: every line is one complete JSON object ending in a newline.
//! * A write that fails (a full disk) is cut back to the end of the last complete write, so no
//!   partial line is left; the batch it was for is rolled back (a key batch) or has committed
//!   (its commit line: its key lines stay, "committed": "unknown").
//! * A tail without its newline, left by a crash or a power loss mid-write, is set aside before
//!   the run writes anything: its bytes move to `FILE.torn-<unix time>` (a new file) and the
//!   archive is cut back to its last complete line. Nothing is ever appended to a torn line.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

use crate::db::reclaim::ArchivedKey;
use crate::exit::{Exit, fail};
use crate::output::rfc3339;
use crate::report::rows::Filter;

/// Why the run takes its keys, for each key line.
pub(crate) struct Why<'a> {
    pub action: &'a str,
    pub older_than: f64,
    pub filter: &'a Filter,
}

/// A committed batch whose commit line could not be written: the write's error, the batch's keys.
#[derive(Debug)]
pub(crate) struct CommitUnwritten {
    error: std::io::Error,
    keys: usize,
}

/// An open archive.
pub(crate) struct Archive {
    path: PathBuf,
    /// The plan an apply takes its keys from (None for a sweep).
    plan: Option<String>,
    file: File,
    /// The length of the file up to its last complete write.
    len: u64,
    batches: u64,
    /// Key lines written.
    pub keys: u64,
}

impl Archive {
    /// Open `path` for appending before any change; a path that cannot be opened is a usage error.
    /// `plan`: the plan file an apply reclaims from.
    pub(crate) fn open(path: &Path, plan: Option<&Path>) -> Result<Archive> {
        let mut options = OpenOptions::new();
        options.create(true).read(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let unopened = |e: &std::io::Error| {
            fail(
                Exit::Usage,
                crate::output::reclaim::archive_unopened(path, e),
            )
        };
        let mut file = options.open(path).map_err(|e| unopened(&e))?;
        let len = set_aside_torn_tail(path, &mut file).map_err(|e| unopened(&e))?;
        Ok(Archive {
            path: path.to_owned(),
            plan: plan.map(|p| p.display().to_string()),
            file,
            len,
            batches: 0,
            keys: 0,
        })
    }

    /// Append a batch's keys and make them durable; returns the batch's id.
    pub(crate) fn write_keys(&mut self, why: &Why<'_>, keys: &[ArchivedKey]) -> Result<String> {
        self.batches += 1;
        let batch = format!("{}-{}", std::process::id(), self.batches);
        let older_than = why.older_than;
        let reason = crate::output::reasons::archived_because(older_than, self.plan.as_deref());
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
            line["scope"] = json!(k.scope);
            line["key"] = json!(k.key);
            line["record"] = k.record.clone();
            serde_json::to_writer(&mut buf, &line)?;
            buf.push(b'\n');
        }
        self.append(&buf)?;
        self.keys += keys.len() as u64;
        Ok(batch)
    }

    /// Record that a batch committed. When that fails the batch has committed all the same: the
    /// error says so.
    pub(crate) fn write_commit(&mut self, batch: &str, keys: usize) -> Result<(), CommitUnwritten> {
        let mut buf = serde_json::to_vec(&json!({"type": "commit", "batch": batch, "keys": keys}))
            .map_err(|e| CommitUnwritten {
                error: e.into(),
                keys,
            })?;
        buf.push(b'\n');
        self.write_whole(&buf)
            .map_err(|error| CommitUnwritten { error, keys })
    }

    /// The error that ends a run whose last batch committed without its commit line, with the
    /// keys the whole run reclaimed (`total`, that batch's included).
    pub(crate) fn commit_unwritten(&self, failed: CommitUnwritten, total: u64) -> anyhow::Error {
        fail(
            Exit::Failure,
            crate::output::reclaim::archive_commit_unwritten(
                &self.path,
                &failed.error,
                failed.keys,
                total,
            ),
        )
    }

    fn append(&mut self, buf: &[u8]) -> Result<()> {
        self.write_whole(buf).map_err(|e| {
            fail(
                Exit::Failure,
                crate::output::reclaim::archive_unwritten(&self.path, &e),
            )
        })
    }

    /// Append `buf` and make it durable, or cut the file back to its last complete write.
    fn write_whole(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let written = self
            .file
            .write_all(buf)
            .and_then(|()| self.file.flush())
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = self.file.sync_data();
                Err(e)
            }
        }
    }
}

/// Where the archive's last complete line ends; a tail after it (no newline: a write cut short by
/// a crash) is moved to a new file beside the archive and cut off, with a warning naming it.
fn set_aside_torn_tail(path: &Path, file: &mut File) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    let end = last_line_end(file, len)?;
    if end == len {
        return Ok(len);
    }
    let mut torn = Vec::new();
    file.seek(SeekFrom::Start(end))?;
    file.take(len - end).read_to_end(&mut torn)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut aside_name = path.as_os_str().to_owned();
    aside_name.push(format!(".torn-{stamp}"));
    let aside = PathBuf::from(aside_name);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut out = options.open(&aside)?;
    out.write_all(&torn)?;
    out.sync_all()?;
    file.set_len(end)?;
    file.sync_all()?;
    crate::output::warn(&crate::output::reclaim::archive_tail_set_aside(
        path,
        &aside,
        len - end,
    ));
    Ok(end)
}

/// The offset just after the last newline of the file's first `len` bytes (0 when none).
fn last_line_end(file: &mut File, len: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let n = usize::try_from(end - start).unwrap_or(0);
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(at) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}
