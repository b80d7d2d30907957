//! Blobs read into memory with a cap: a registry that declares one size and streams more, or
//! declares more than toolcell takes, is cut off at the cap instead of filling the memory.

use std::pin::Pin;
use std::task::{Context, Poll};

/// The largest component toolcell pulls.
pub(crate) const MAX_COMPONENT: u64 = 256 * 1024 * 1024;
/// The largest config blob.
pub(crate) const MAX_CONFIG: u64 = 4 * 1024 * 1024;

/// An in-memory sink that refuses to hold more than `cap` bytes.
pub(crate) struct Capped {
    pub(crate) bytes: Vec<u8>,
    cap: u64,
}

impl Capped {
    /// A sink for a blob declared `declared` bytes long, refused beyond it or beyond `max`.
    pub(crate) fn new(declared: i64, max: u64) -> Result<Self, String> {
        let declared = u64::try_from(declared).map_err(|_| format!("its declared size {declared} is negative"))?;
        if declared > max {
            return Err(format!("its declared size of {declared} bytes is over the {max} toolcell takes"));
        }
        Ok(Self { bytes: Vec::with_capacity(usize::try_from(declared.min(1 << 20)).unwrap_or(0)), cap: declared })
    }
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buffer: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.bytes.len() as u64 + buffer.len() as u64 > this.cap {
            return Poll::Ready(Err(std::io::Error::other(format!("the registry sent more than the {} bytes declared", this.cap))));
        }
        this.bytes.extend_from_slice(buffer);
        Poll::Ready(Ok(buffer.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
