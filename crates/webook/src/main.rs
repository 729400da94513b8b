//! The `webook` binary: parses the command line and runs the chosen subcommand.
//!
//! Every start-up failure ends here as one line on stderr (`error: …` with its cause chain) and
//! exit code 1 — never a panic or a backtrace — so operators see which setting is wrong. The log
//! lines still queued are written first ([`platform::telemetry::flush_logs`]); a stderr that
//! cannot be written (a full disk) loses the line, not the exit code.

use std::{io::Write, process::ExitCode, time::Duration};

/// How long the end of the process waits for queued log lines to be written.
const LOG_FLUSH_LIMIT: Duration = Duration::from_secs(2);

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
            let _ = writeln!(
                std::io::stderr(),
                "error: cannot start the async runtime: {err}"
            );
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        let outcome = cli.run().await;
        // The spans still buffered for export (nothing when tracing is off).
        platform::telemetry::flush_traces(LOG_FLUSH_LIMIT).await;
        outcome
    });
    platform::telemetry::flush_logs(LOG_FLUSH_LIMIT);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole cause chain on one line: "context: cause: root cause".
            let _ = writeln!(std::io::stderr(), "error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
