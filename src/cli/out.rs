//! Standard output for the subcommands: a reader that goes away (`toolgate review list | head`)
//! ends the output quietly instead of a panic. `println!` panics when stdout is a closed pipe
//! (Rust ignores SIGPIPE); [`outln!`] does not: after a broken pipe, nothing more is written and
//! the command carries on to its exit code. Any other write error is reported once on stderr.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout failed: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` and a newline to stdout (see the module's doc).
pub fn line(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written.and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Whether stdout failed (the reader went away): nothing more is written.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Whether `e` came from writing to stdout; records it (quietly for a broken pipe).
pub fn failed(e: &std::io::Error) {
    if !CLOSED.swap(true, Ordering::Relaxed) && e.kind() != std::io::ErrorKind::BrokenPipe {
        eprintln!("toolgate: cannot write to standard output: {e}");
    }
}

/// `println!` that never panics on a closed stdout (see [`line`]).
macro_rules! outln {
    () => { $crate::cli::out::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::cli::out::line(format_args!($($arg)*)) };
}
