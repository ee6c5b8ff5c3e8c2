//! The `toolgate` command-line tool (see `toolgate --help`).

// With the `mimalloc` feature (on by default) the binary allocates with mimalloc, which serves
// the audit trail's cross-thread frees far better than the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate::cli::main()
}
