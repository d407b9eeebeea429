//! The `idemctl` binary: parse arguments, run, report the error chain once, exit with a documented code.

use std::process::ExitCode;

fn main() -> ExitCode {
    idemctl::main_entry()
}
