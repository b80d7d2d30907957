//! Captured stdio: what a component writes on stdout and stderr, its first bytes kept and the
//! rest counted.

use std::sync::{Arc, Mutex};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

pub use toolcell_outcome::Captured;

/// A capture pipe that keeps the first `capacity` bytes and counts the rest. Unlike a pipe
/// that fails when full, it never breaks the guest's `println!`.
#[derive(Clone)]
pub(crate) struct CapturePipe {
    capacity: usize,
    captured: Arc<Mutex<Captured>>,
}

impl CapturePipe {
    pub(crate) fn new(capacity: usize) -> Self {
        CapturePipe { capacity, captured: Arc::new(Mutex::new(Captured::default())) }
    }

    pub(crate) fn take(&self) -> Captured {
        std::mem::take(&mut *self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn keep(&self, bytes: &[u8]) {
        let mut captured = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = self.capacity.saturating_sub(captured.bytes.len());
        let kept = bytes.len().min(room);
        captured.bytes.extend_from_slice(&bytes[..kept]);
        captured.dropped += (bytes.len() - kept) as u64;
    }
}

impl IsTerminal for CapturePipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturePipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CapturePipe {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturePipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CapturePipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.keep(buffer);
        std::task::Poll::Ready(Ok(buffer.len()))
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, _context: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _context: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_the_first_bytes_and_counts_the_rest() {
        let pipe = CapturePipe::new(4);
        pipe.keep(b"abc");
        pipe.keep(b"defg");
        assert_eq!(pipe.take(), Captured { bytes: b"abcd".to_vec(), dropped: 3 });
    }
}
