//! A file's streams, read and written on the calling thread.
//!
//! wasmtime-wasi's file streams run every non-blocking `write` (and `read`) on tokio's blocking
//! pool, even when the store may block its own thread: the guest's `write` hands the bytes to a
//! pool thread, and its `blocking-flush` waits for that thread to finish. wasi-libc writes a
//! file that way (`check-write`, `write`, `blocking-flush`), so every file a component wrote
//! cost two thread wake-ups, each one on a virtual CPU that may have been idle. The host runs
//! calls on threads of their own that may block ([`BLOCKING_IN_PLACE`](super::BLOCKING_IN_PLACE)),
//! so these streams do the I/O in the call itself, with the same answers: the bytes a `write`
//! accepted are on the file when the next call on the stream returns, and an error surfaces on
//! the stream's next `check-write` or `flush`, then closes it.

use std::io;
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

/// The most a `check-write` allows at once, and the most one `read` returns (wasmtime-wasi's).
const MOST_AT_ONCE: usize = 64 * 1024;

/// Where a file's output stream writes.
#[derive(Clone, Copy)]
pub(super) enum Place {
    /// At this offset, which each write advances.
    At(u64),
    /// At the file's end, whatever it is at the time.
    End,
}

enum State {
    Ready,
    /// The last write failed: reported by the next `check-write` or `flush`.
    Failed(io::Error),
    Closed,
}

/// An output stream writing to a file on the calling thread.
pub(super) struct FileWriter {
    file: Arc<std::fs::File>,
    place: Place,
    state: State,
    /// Alive as long as the stream: [`FileWriter::alive`] tells whether it still is.
    alive: Arc<()>,
    /// Start writing what the writes leave to the device at once (a file this call syncs
    /// before placing it): see [`FileWriter::starting_writeback`].
    writeback: bool,
    /// Where the writeback started so far ends, if it started at all.
    hinted: Option<u64>,
}

impl FileWriter {
    pub(super) fn new(file: Arc<std::fs::File>, place: Place) -> Self {
        FileWriter { file, place, state: State::Ready, alive: Arc::new(()), writeback: false, hinted: None }
    }

    /// Have the writes start the writeback of what they wrote
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which waits for nothing): for a file the call
    /// syncs when it places it, so that the device writes the content while the component
    /// finishes and its instance is torn down, and the sync then finds it written or under
    /// way. Only a hint: the sync is what makes the content durable. The first write starts
    /// all it wrote (a file written in one go, the usual rewrite); later ones only the whole
    /// pages they complete (see [`writeback_range`]), so that a file written in many small
    /// pieces is not sent to the device again for every piece.
    pub(super) fn starting_writeback(mut self, writeback: bool) -> Self {
        self.writeback = writeback;
        self
    }

    /// The file it writes to.
    pub(super) fn file(&self) -> &Arc<std::fs::File> {
        &self.file
    }

    /// What tells whether this stream still exists (and so may still write): upgradable
    /// until it is dropped.
    pub(super) fn alive(&self) -> std::sync::Weak<()> {
        Arc::downgrade(&self.alive)
    }

    /// Write all of `bytes`, advancing the offset by what was written.
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let start = match self.place {
            Place::At(offset) => offset,
            Place::End => 0,
        };
        let mut rest = bytes;
        while !rest.is_empty() {
            let written = match self.place {
                Place::At(offset) => self.file.write_at(rest, offset),
                Place::End => append(&self.file, rest),
            };
            let written = match written {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(written) => written,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if let Place::At(offset) = &mut self.place {
                *offset += written as u64;
            }
            rest = &rest[written..];
        }
        if self.writeback {
            let (range, hinted) = match self.place {
                Place::At(end) => writeback_range(self.hinted, start, end, PAGE),
                // Where an append lands is not known here: the first one starts the whole
                // file (0 bytes: to its end), later ones nothing.
                Place::End => (self.hinted.is_none().then_some((0, 0)), self.hinted.unwrap_or(0)),
            };
            if let Some((offset, length)) = range {
                start_writeback(&self.file, offset, length);
            }
            self.hinted = Some(hinted);
        }
        Ok(())
    }

    /// The stream's state for a `check-write` or `flush`: a failed write is reported once,
    /// and the stream is closed after it.
    fn settle(&mut self) -> StreamResult<()> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Ready => {
                self.state = State::Ready;
                Ok(())
            }
            State::Failed(error) => Err(StreamError::LastOperationFailed(error.into())),
            State::Closed => Err(StreamError::Closed),
        }
    }
}

/// The size of the pages writeback is counted in.
const PAGE: u64 = 4096;

/// What to start writing back after a write of `start..end`, as `(offset, length)`, when the
/// writeback started so far ends at `hinted`, and where it ends then: the first write, all it
/// wrote; a later one, the whole pages from where the writeback ended (or the write's own
/// first page) up to the page the write ends in, if any. A page a later write fills again is
/// then started once it is whole, not again for every write into it.
fn writeback_range(hinted: Option<u64>, start: u64, end: u64, page: u64) -> (Option<(u64, u64)>, u64) {
    let to = end / page * page;
    let range = match hinted {
        None => (end > start).then(|| (start, end - start)),
        Some(hinted) => {
            let from = hinted.max(start / page * page);
            (to > from).then(|| (from, to - from))
        }
    };
    (range, hinted.unwrap_or(0).max(to))
}

/// Start writing `length` bytes of `file` from `offset` (0: to its end) to the device, without
/// waiting. A failure is of no consequence (the sync that follows reports any of its own).
fn start_writeback(file: &std::fs::File, offset: u64, length: u64) {
    use std::os::fd::AsRawFd as _;
    let (Ok(offset), Ok(length)) = (i64::try_from(offset), i64::try_from(length)) else {
        return;
    };
    // SAFETY: `sync_file_range` reads no memory of this process: it takes a descriptor, which
    // `file` keeps open for the call, and two integers.
    #[expect(unsafe_code, reason = "sync_file_range has no safe binding in rustix")]
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, length, libc::SYNC_FILE_RANGE_WRITE) };
}

/// Append `bytes` to `file`: `pwritev2` with `RWF_APPEND`, or the descriptor switched to
/// `O_APPEND` for the one write where the kernel has no such flag (as wasmtime-wasi does).
fn append(file: &std::fs::File, bytes: &[u8]) -> io::Result<usize> {
    use rustix::fs::OFlags;
    use rustix::io::{Errno, ReadWriteFlags};
    match rustix::io::pwritev2(file, &[io::IoSlice::new(bytes)], 0, ReadWriteFlags::APPEND) {
        Err(Errno::NOSYS | Errno::NOTSUP) => {}
        otherwise => return Ok(otherwise?),
    }
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags | OFlags::APPEND)?;
    let written = rustix::io::write(file, bytes);
    rustix::fs::fcntl_setfl(file, flags)?;
    Ok(written?)
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        match self.state {
            State::Ready => {}
            State::Closed => return Err(StreamError::Closed),
            // A failure is reported by `check-write`, which the guest must call before writing.
            State::Failed(_) => return Err(StreamError::trap("write not permitted: check_write not called first")),
        }
        if let Err(error) = self.write_all(&bytes) {
            self.state = State::Failed(error);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.settle()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.settle().map(|()| MOST_AT_ONCE)
    }

    async fn cancel(&mut self) {
        self.state = State::Closed;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {}
}

/// An input stream reading a file from an offset on the calling thread.
pub(super) struct FileReader {
    file: Arc<std::fs::File>,
    offset: u64,
    closed: bool,
}

impl FileReader {
    pub(super) fn new(file: Arc<std::fs::File>, offset: u64) -> Self {
        FileReader { file, offset, closed: false }
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if self.closed {
            return Err(StreamError::Closed);
        }
        if size == 0 {
            return Ok(Bytes::new());
        }
        let mut buffer = BytesMut::zeroed(size.min(MOST_AT_ONCE));
        loop {
            match self.file.read_at(&mut buffer, self.offset) {
                Ok(0) => {
                    self.closed = true;
                    return Err(StreamError::Closed);
                }
                Ok(read) => {
                    buffer.truncate(read);
                    self.offset += read as u64;
                    return Ok(buffer.freeze());
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.closed = true;
                    return Err(StreamError::LastOperationFailed(error.into()));
                }
            }
        }
    }

    async fn cancel(&mut self) {
        self.closed = true;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {}
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn file_with(content: &[u8], options: &mut std::fs::OpenOptions) -> (tempfile::TempDir, std::path::PathBuf, Arc<std::fs::File>) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("file");
        std::fs::write(&path, content).expect("write");
        let file = options.open(&path).expect("open");
        (directory, path, Arc::new(file))
    }

    #[test]
    fn a_write_is_on_the_file_when_it_returns_and_moves_the_offset() {
        let (_directory, path, file) = file_with(b"0123456789", std::fs::OpenOptions::new().write(true));
        let mut writer = FileWriter::new(file, Place::At(2));
        assert_eq!(writer.check_write().expect("ready"), MOST_AT_ONCE);
        writer.write(Bytes::from_static(b"ab")).expect("write");
        // No flush, no wait: the bytes are on the file already.
        assert_eq!(std::fs::read(&path).expect("read"), b"01ab456789");
        writer.write(Bytes::from_static(b"cd")).expect("write");
        writer.flush().expect("flush");
        assert_eq!(std::fs::read(&path).expect("read"), b"01abcd6789");
    }

    #[test]
    fn an_append_lands_at_the_end_the_file_has_at_the_time() {
        let (_directory, path, file) = file_with(b"start", std::fs::OpenOptions::new().write(true));
        let mut writer = FileWriter::new(file, Place::End);
        writer.write(Bytes::from_static(b"+one")).expect("write");
        // The file grows through another descriptor; the next append goes after that.
        std::fs::OpenOptions::new().append(true).open(&path).expect("open").write_all(b"|other|").expect("append");
        writer.write(Bytes::from_static(b"+two")).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"start+one|other|+two");
    }

    #[test]
    fn writes_that_start_their_writeback_write_the_same_bytes_and_never_fail_for_it() {
        let (_directory, path, file) = file_with(b"0123456789", std::fs::OpenOptions::new().write(true));
        let mut writer = FileWriter::new(Arc::clone(&file), Place::At(8)).starting_writeback(true);
        writer.write(Bytes::from(vec![b'x'; 3 * MOST_AT_ONCE])).expect("write");
        writer.flush().expect("flush");
        let mut appender = FileWriter::new(file, Place::End).starting_writeback(true);
        appender.write(Bytes::from_static(b"end")).expect("append");
        appender.flush().expect("flush");
        let mut expected = b"01234567".to_vec();
        expected.extend(std::iter::repeat_n(b'x', 3 * MOST_AT_ONCE));
        expected.extend(b"end");
        assert_eq!(std::fs::read(&path).expect("read"), expected);
        // Where writeback cannot start (a character device: `ESPIPE`), the write still is.
        let null = Arc::new(std::fs::OpenOptions::new().write(true).open("/dev/null").expect("open /dev/null"));
        let mut writer = FileWriter::new(null, Place::At(0)).starting_writeback(true);
        writer.write(Bytes::from_static(b"gone")).expect("write");
        assert_eq!(writer.check_write().expect("no failure"), MOST_AT_ONCE);
    }

    #[test]
    fn a_file_written_in_small_pieces_is_started_about_once_and_one_written_at_once_whole() {
        // One write: all of it, the page it ends in too.
        assert_eq!(writeback_range(None, 0, 4000, PAGE).0, Some((0, 4000)));
        // 20,000 writes of 16 bytes: about the file's size in all, never a page per write.
        let (mut hinted, mut started, mut hints) = (None, 0, 0);
        for write in 0..20_000u64 {
            let (start, end) = (write * 16, write * 16 + 16);
            let (range, now) = writeback_range(hinted, start, end, PAGE);
            if let Some((offset, length)) = range {
                assert!(offset + length <= end, "nothing past what was written");
                started += length;
                hints += 1;
            }
            hinted = Some(now);
        }
        assert!(started <= 20_000 * 16 + PAGE, "{started} bytes started for a file of 320,000");
        assert!(hints <= 20_000 * 16 / PAGE + 2, "{hints} starts");
        // A write back into pages already started starts nothing again.
        assert_eq!(writeback_range(Some(8 * PAGE), PAGE, 3 * PAGE, PAGE), (None, 8 * PAGE));
        // A write past a hole: its own whole pages.
        assert_eq!(writeback_range(Some(PAGE), 10 * PAGE + 5, 12 * PAGE + 7, PAGE), (Some((10 * PAGE, 2 * PAGE)), 12 * PAGE));
    }

    #[test]
    fn a_failed_write_is_reported_once_then_the_stream_is_closed() {
        // A descriptor open for reading only: the write fails (`EBADF`).
        let (_directory, path, file) = file_with(b"kept", std::fs::OpenOptions::new().read(true));
        let mut writer = FileWriter::new(file, Place::At(0));
        writer.write(Bytes::from_static(b"lost")).expect("the write is accepted; its failure comes next");
        assert!(matches!(writer.check_write(), Err(StreamError::LastOperationFailed(_))));
        assert!(matches!(writer.check_write(), Err(StreamError::Closed)));
        assert!(matches!(writer.write(Bytes::from_static(b"x")), Err(StreamError::Closed)));
        assert_eq!(std::fs::read(&path).expect("read"), b"kept");
    }

    #[test]
    fn a_read_starts_at_its_offset_and_ends_closed() {
        let (_directory, _path, file) = file_with(b"0123456789", std::fs::OpenOptions::new().read(true));
        let mut reader = FileReader::new(file, 3);
        assert_eq!(reader.read(4).expect("read"), Bytes::from_static(b"3456"));
        assert_eq!(reader.read(0).expect("an empty read"), Bytes::new());
        assert_eq!(reader.read(100).expect("read"), Bytes::from_static(b"789"));
        assert!(matches!(reader.read(1), Err(StreamError::Closed)));
        assert!(matches!(reader.read(1), Err(StreamError::Closed)));
    }
}
