//! A tiny tmpfs, mounted for one test (the full-disk tests: archive, plan and metrics files on a
//! filesystem that fills up). Mounting needs root, which the test environment has; a mount that
//! fails makes the test panic with the reason: these tests never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs; unmounted (lazily) and removed when dropped.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (e.g. `"64k"`) on a fresh directory.
    pub(crate) fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("a directory to mount on");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0777"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            out.status.success(),
            "cannot mount a {size} tmpfs on {} (the full-disk tests need root): {}",
            dir.path().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Give the filesystem `size` (room for the next run).
    pub(crate) fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            out.status.success(),
            "cannot resize the tmpfs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
