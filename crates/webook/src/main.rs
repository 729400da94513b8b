//! The `webook` binary: parses the command line and runs the chosen subcommand.
//!
//! Every start-up failure ends here as one line on stderr (`error: …` with its cause chain) and
//! exit code 1 — never a panic or a backtrace — so operators see which setting is wrong.

use std::process::ExitCode;

/// mimalloc instead of the system allocator: glibc malloc's arena locks and consolidation were
/// a tenth of the server's CPU time under load (measured with `perf` on `GET /ranking/top`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = webook::cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli.run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole cause chain on one line: "context: cause: root cause".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
