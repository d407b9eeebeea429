//! Running the `idemctl` binary (or any program) from tests: a hermetic environment, no TTY, a
//! timeout, captured output, and assertions that print the whole run when they fail.

use std::ffi::OsStr;
use std::fmt;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The binary under test.
pub(crate) const IDEMCTL: &str = env!("CARGO_BIN_EXE_idemctl");

/// Default limit on how long one run may take.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Builder for one run of a program (by default the `idemctl` binary).
///
/// The child starts with the test process's environment minus every variable whose name starts with
/// `PG` or `IDEMCTL_`, and minus `DATABASE_URL`, so neither the developer's shell nor the harness leaks
/// settings into it; add what a test needs with `env`. Stdin is `/dev/null` unless `stdin_bytes` is
/// given, stdout and stderr are pipes: the child never has a terminal, as under cron.
#[derive(Debug)]
pub(crate) struct Cmd {
    command: Command,
    shown: String,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl Default for Cmd {
    fn default() -> Self {
        Self::new()
    }
}

impl Cmd {
    /// The `idemctl` binary built by cargo for this test run.
    pub(crate) fn new() -> Self {
        Self::of(IDEMCTL)
    }

    /// Any program (looked up on PATH when not a path), with the same hermetic environment.
    pub(crate) fn of(program: impl AsRef<OsStr>) -> Self {
        let program = program.as_ref();
        let mut command = Command::new(program);
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("PG") || name.starts_with("IDEMCTL_") || name == "DATABASE_URL" {
                command.env_remove(&key);
            }
        }
        let shown = std::path::Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned();
        Self {
            command,
            shown,
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Add one argument.
    pub(crate) fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.shown.push(' ');
        self.shown.push_str(&shell_word(arg.as_ref()));
        self.command.arg(arg);
        self
    }

    /// Add several arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for arg in args {
            self = self.arg(arg);
        }
        self
    }

    /// Set an environment variable for the child (overrides the removals above).
    pub(crate) fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Remove an environment variable from the child.
    pub(crate) fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Run the child in this directory.
    pub(crate) fn current_dir(mut self, dir: impl AsRef<std::path::Path>) -> Self {
        self.command.current_dir(dir);
        self
    }

    /// Feed these bytes on stdin, then close it.
    pub(crate) fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kill the child and panic if it has not exited after this long (default 60 s).
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Start the child without waiting: for concurrency and signal tests. Its output is drained in the
    /// background, so it never blocks on a full pipe. Dropping the `Spawned` kills the child.
    pub(crate) fn spawn(mut self) -> Spawned {
        self.command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = self
            .command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", self.shown));
        let stdin_writer = match (self.stdin.take(), child.stdin.take()) {
            (Some(bytes), Some(mut pipe)) => Some(std::thread::spawn(move || {
                // The child may exit without reading everything (EPIPE): not our concern.
                let _ = pipe.write_all(&bytes);
            })),
            _ => None,
        };
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Spawned {
            child: Some(child),
            stdout,
            stderr,
            stdin_writer,
            shown: self.shown,
            started,
            timeout: self.timeout,
        }
    }

    /// Run to completion (blocking this thread) and capture the outcome.
    pub(crate) fn run(self) -> Run {
        self.spawn().wait()
    }

    /// `run` on tokio's blocking pool, so connection tasks of the calling runtime keep running
    /// meanwhile (needed when the test holds locks or transactions the child waits for).
    pub(crate) async fn run_async(self) -> Run {
        tokio::task::spawn_blocking(move || self.run())
            .await
            .unwrap_or_else(|e| rethrow(e))
    }
}

/// Re-raise a panic from the blocking pool in the test's thread (so `should_panic` and messages work).
fn rethrow(e: tokio::task::JoinError) -> ! {
    match e.try_into_panic() {
        Ok(payload) => std::panic::resume_unwind(payload),
        Err(e) => panic!("the blocking task did not finish: {e}"),
    }
}

fn drain(mut pipe: impl std::io::Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn shell_word(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,@%+".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A child started by `Cmd::spawn`.
#[derive(Debug)]
pub(crate) struct Spawned {
    child: Option<Child>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    stdin_writer: Option<JoinHandle<()>>,
    shown: String,
    started: Instant,
    timeout: Duration,
}

impl Spawned {
    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Send a signal by name (`INT`, `TERM`, `KILL`, ...) with kill(1).
    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.pid().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -s {name} {} failed", self.pid());
    }

    /// Whether the child has exited (without reaping the output).
    pub(crate) fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The underlying process (already without its stdio pipes).
    pub(crate) fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the child is still owned")
    }

    /// Wait for the exit, within what is left of the timeout (counted from `spawn`); on expiry interrupt
    /// the child (SIGINT), kill it if it is still there 5 s later, and panic with its output.
    pub(crate) fn wait(mut self) -> Run {
        let mut child = self.child.take().expect("the child is still owned");
        let deadline = self.started + self.timeout;
        let mut pause = Duration::from_millis(1);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    // Interrupt it first, so that its output says what it was waiting for.
                    let _ = std::process::Command::new("kill")
                        .args(["-s", "INT", &child.id().to_string()])
                        .status();
                    let grace = Instant::now() + Duration::from_secs(5);
                    while Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => panic!("waiting for `{}`: {e}", self.shown),
            }
        };
        let elapsed = self.started.elapsed();
        if let Some(writer) = self.stdin_writer.take() {
            let _ = writer.join();
        }
        let collect = |h: Option<JoinHandle<Vec<u8>>>| {
            let bytes = h.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let run = Run {
            code: status.map_or(-1, exit_code),
            stdout: collect(self.stdout.take()),
            stderr: collect(self.stderr.take()),
            command: self.shown.clone(),
            elapsed,
        };
        if status.is_none() {
            panic!("timed out after {:?}; killed\n{run}", self.timeout);
        }
        run
    }

    /// `wait` on tokio's blocking pool.
    pub(crate) async fn wait_async(self) -> Run {
        tokio::task::spawn_blocking(move || self.wait())
            .await
            .unwrap_or_else(|e| rethrow(e))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The exit code, or 128 + the signal number when a signal ended the process (as shells report it).
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// Exit code; 128 + N when killed by signal N.
    pub code: i32,
    /// Stdout, lossily decoded as UTF-8.
    pub stdout: String,
    /// Stderr, lossily decoded as UTF-8.
    pub stderr: String,
    /// The command line, for messages.
    pub command: String,
    /// Wall time from spawn to exit.
    pub elapsed: Duration,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "--- command: {}", self.command)?;
        writeln!(f, "--- exit code: {} (after {:?})", self.code, self.elapsed)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

impl Run {
    /// Assert the exit code.
    #[track_caller]
    pub(crate) fn assert_code(&self, expected: i32) -> &Self {
        assert!(
            self.code == expected,
            "expected exit code {expected}, got {}\n{self}",
            self.code
        );
        self
    }

    /// Assert exit code 0.
    #[track_caller]
    pub(crate) fn assert_success(&self) -> &Self {
        self.assert_code(0)
    }

    /// Assert stdout is exactly this.
    #[track_caller]
    pub(crate) fn assert_stdout(&self, expected: &str) -> &Self {
        assert!(
            self.stdout == expected,
            "stdout differs\n--- expected stdout ---\n{expected}\n{self}"
        );
        self
    }

    /// Assert stderr is exactly this.
    #[track_caller]
    pub(crate) fn assert_stderr(&self, expected: &str) -> &Self {
        assert!(
            self.stderr == expected,
            "stderr differs\n--- expected stderr ---\n{expected}\n{self}"
        );
        self
    }

    /// Assert a refusal or error: this exit code, nothing on stdout, and exactly one stderr line
    /// `idemctl: MESSAGE`.
    #[track_caller]
    pub(crate) fn assert_error(&self, code: i32, message: &str) -> &Self {
        self.assert_code(code)
            .assert_stdout_empty()
            .assert_stderr(&format!("idemctl: {message}\n"))
    }

    /// Assert stdout contains this.
    #[track_caller]
    pub(crate) fn assert_stdout_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout does not contain {needle:?}\n{self}"
        );
        self
    }

    /// Assert stderr contains this.
    #[track_caller]
    pub(crate) fn assert_stderr_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr does not contain {needle:?}\n{self}"
        );
        self
    }

    /// Assert stdout is empty.
    #[track_caller]
    pub(crate) fn assert_stdout_empty(&self) -> &Self {
        assert!(self.stdout.is_empty(), "stdout is not empty\n{self}");
        self
    }

    /// Assert stderr is empty.
    #[track_caller]
    pub(crate) fn assert_stderr_empty(&self) -> &Self {
        assert!(self.stderr.is_empty(), "stderr is not empty\n{self}");
        self
    }

    /// Stdout parsed as one JSON document.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not a JSON document: {e}\n{self}"))
    }

    /// Stdout parsed as JSON Lines (one document per non-empty line).
    #[track_caller]
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("stdout line {} is not JSON: {e}\n{self}", i + 1))
            })
            .collect()
    }
}
