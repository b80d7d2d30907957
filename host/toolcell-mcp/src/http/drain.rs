//! The end of `serve` on SIGTERM: calls in flight get `shutdown_grace` to finish and answer.

use std::time::Duration;

use super::Service;
use crate::bounds::Kind;

/// Wait, up to `grace`, until no tool call runs and their answers are sent; say what was cut
/// off past it (a call killed then is rolled back whole, as any call that does not finish).
pub(super) async fn drain(service: &Service, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    let calls = || service.ledger.total(Kind::Call);
    let running = calls();
    if running > 0 {
        let _ = crate::writeln_stderr(&format!(
            "toolcell serve: stopping: no new connections; {running} calls in flight get up to {} to finish (`shutdown_grace`)",
            humantime::format_duration(grace)
        ));
    }
    while calls() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The answers of the last calls are on their way: a moment for them (streams a client
    // keeps open are ended after it).
    let flush = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
    while service.ledger.total(Kind::Request) > 0 && tokio::time::Instant::now() < flush {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = calls();
    let _ = crate::writeln_stderr(&if left == 0 {
        "toolcell serve: stopped".to_owned()
    } else {
        format!("toolcell serve: stopped with {left} calls still running past `shutdown_grace`: they are rolled back")
    });
}
