//! Reading a window of a text file as numbered lines: what `read_file` and `read_many` return.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use serde_json::json;

use crate::encoding::{self, DecodingReader, TextEncoding};
use crate::entry::EntryKind;
use crate::path::quote;
use crate::text::{self, BINARY_SNIFF_BYTES};
use crate::{Output, ToolError, WorkspacePath};

mod line_index;
use line_index::{Fingerprint, INDEX_MIN_BYTES, IndexBuilder, LineIndex};

/// Lines returned when the caller gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut, with a marker.
pub const MAX_LINE_CHARS: usize = 2000;

/// Bytes looked at to tell the encoding of a file of [`INDEX_MIN_BYTES`] or more.
const ENCODING_SNIFF_BYTES: u64 = 64 * 1024;

/// Read lines `offset..offset + limit` (1-based; defaults 1 and [`DEFAULT_LIMIT`]) of the text
/// file `path`, numbered `cat -n` style, the text stopping once it reaches `max_output_bytes`.
///
/// # Errors
///
/// `not-found`, `denied` (the host refused), `unsupported` for a directory, a special file or
/// a binary file, `invalid-args` for an offset past the end.
pub fn read_lines(path: &WorkspacePath, offset: Option<u64>, limit: Option<u64>, max_output_bytes: usize) -> Result<Output, ToolError> {
    OpenedFile::open(path)?.read_lines(path, offset, limit, max_output_bytes)
}

/// A regular file opened for [`OpenedFile::read_lines`], with its first bytes already read: a
/// caller can look at them (is it an image?) without opening the file a second time.
pub struct OpenedFile {
    metadata: crate::scan::FileStat,
    file: crate::scan::FileReader,
    head: Vec<u8>,
    /// How many bytes were asked for `head`: fewer read means the whole file is in it.
    sniff: u64,
}

impl OpenedFile {
    /// Open the regular file `path` and read its head (the whole file when it is small).
    ///
    /// # Errors
    ///
    /// As [`read_lines`], but for a binary file, which only reading its lines refuses.
    pub fn open(path: &WorkspacePath) -> Result<OpenedFile, ToolError> {
        // Look before opening: opening a FIFO would block until a writer appears.
        let metadata = crate::scan::stat(path.as_str()).map_err(|error| path.io_error(error))?;
        if metadata.kind == EntryKind::Directory {
            return Err(ToolError::Unsupported(format!(
                "{} is a directory, not a file: use `list_files` to see what it holds",
                quote(path.as_str())
            )));
        }
        if metadata.kind != EntryKind::File {
            return Err(ToolError::Unsupported(format!(
                "{} is not a regular file (it is a FIFO, socket or device): only regular files can be read",
                quote(path.as_str())
            )));
        }
        let mut file = crate::scan::open_reader(path.as_str()).map_err(|error| path.io_error(error))?;
        // A file read whole anyway is looked at whole to tell its encoding; a larger one by its head.
        let sniff = if metadata.size < INDEX_MIN_BYTES { INDEX_MIN_BYTES } else { ENCODING_SNIFF_BYTES };
        let sniff = sniff.min(metadata.size.saturating_add(1));
        let head = read_head(&mut file, sniff).map_err(|error| path.io_error(error))?;
        Ok(OpenedFile { metadata, file, head, sniff })
    }

    /// The file's first bytes (up to 64 KiB, or the whole file).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// [`read_lines`] of this file.
    ///
    /// # Errors
    ///
    /// As [`read_lines`].
    pub fn read_lines(
        self,
        path: &WorkspacePath,
        offset: Option<u64>,
        limit: Option<u64>,
        max_output_bytes: usize,
    ) -> Result<Output, ToolError> {
        let OpenedFile { metadata, mut file, head, sniff } = self;
        let start = offset.unwrap_or(1);
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        let Some(encoding) = encoding::detect(&head, (head.len() as u64) < sniff) else {
            return Err(ToolError::Unsupported(format!(
                "{} looks like a binary file (it has a NUL byte in its first {} KiB): only text files can be read",
                quote(path.as_str()),
                BINARY_SNIFF_BYTES / 1024
            )));
        };
        // Big enough for a few host calls per MiB, small enough that a small file's call does
        // not grow the component's memory.
        let capacity = usize::try_from(metadata.size).unwrap_or(usize::MAX).clamp(4 * 1024, 64 * 1024);
        if !encoding.is_utf8() {
            // Decoded to UTF-8 on the way; line indexes (byte offsets in the file) are for UTF-8
            // files only.
            let reader = DecodingReader::new(std::io::Cursor::new(head).chain(file), encoding);
            let window =
                read_window(BufReader::with_capacity(capacity, reader), Position::TOP, start, limit, max_output_bytes, Total::Count(None))
                    .map_err(|error| path.io_error(error))?;
            return render(path, start, window, max_output_bytes, encoding);
        }
        let fingerprint = Fingerprint::of(&metadata);
        if let Some(index) = fingerprint.as_ref().and_then(|fingerprint| LineIndex::recall(path, fingerprint)) {
            // Start at the last recorded line start at or before the window.
            let checkpoint = usize::try_from((start.max(1) - 1) / index.stride).unwrap_or(usize::MAX).min(index.starts.len() - 1);
            let offset = index.starts[checkpoint];
            if starts_a_line(&mut file, offset).map_err(|error| path.io_error(error))? {
                file.seek(SeekFrom::Start(offset)).map_err(|error| path.io_error(error))?;
                let position = Position { line: checkpoint as u64 * index.stride, offset };
                let window = read_window(
                    BufReader::with_capacity(capacity, file),
                    position,
                    start,
                    limit,
                    max_output_bytes,
                    Total::Known(index.total_lines),
                )
                .map_err(|error| path.io_error(error))?;
                return render(path, start, window, max_output_bytes, encoding);
            }
        }
        let mut builder = fingerprint.map(IndexBuilder::new);
        let total = Total::Count(builder.as_mut());
        let window = if (head.len() as u64) < sniff {
            // The head is the whole file: read from it alone, without asking the host again
            // where the file ends.
            read_window(std::io::Cursor::new(head), Position::TOP, start, limit, max_output_bytes, total)
        } else {
            let rest = BufReader::with_capacity(capacity, std::io::Cursor::new(head).chain(file));
            read_window(rest, Position::TOP, start, limit, max_output_bytes, total)
        }
        .map_err(|error| path.io_error(error))?;
        if let Some(builder) = builder {
            builder.finish(window.total_lines).remember(path);
        }
        render(path, start, window, max_output_bytes, encoding)
    }
}

/// How many lines the regular file at `path` has (a last line without a newline counts), for
/// reading its tail. Counted in whole buffers, nothing decoded; taken from the file's line
/// index when the session has one.
///
/// # Errors
///
/// The path's error, as [`read_lines`] would report it.
pub fn count_lines(path: &WorkspacePath) -> Result<u64, ToolError> {
    let metadata = crate::scan::stat(path.as_str()).map_err(|error| path.io_error(error))?;
    if metadata.kind != EntryKind::File {
        // `read_lines` says what it is instead.
        return Ok(0);
    }
    let fingerprint = Fingerprint::of(&metadata);
    if let Some(index) = fingerprint.as_ref().and_then(|fingerprint| LineIndex::recall(path, fingerprint)) {
        return Ok(index.total_lines);
    }
    let mut file = crate::scan::open_reader(path.as_str()).map_err(|error| path.io_error(error))?;
    let head = read_head(&mut file, ENCODING_SNIFF_BYTES.min(metadata.size.saturating_add(1))).map_err(|error| path.io_error(error))?;
    let encoding = encoding::detect(&head, (head.len() as u64) < ENCODING_SNIFF_BYTES.min(metadata.size.saturating_add(1)));
    let rest = std::io::Cursor::new(head).chain(file);
    if let Some(encoding) = encoding.filter(TextEncoding::is_utf16) {
        // A newline byte in UTF-16 may be half of another character: counted decoded.
        let reader = BufReader::with_capacity(64 * 1024, DecodingReader::new(rest, encoding));
        return read_window(reader, Position::TOP, u64::MAX, 0, 0, Total::Count(None))
            .map(|window| window.total_lines)
            .map_err(|error| path.io_error(error));
    }
    let reader = BufReader::with_capacity(64 * 1024, rest);
    let mut builder = fingerprint.map(IndexBuilder::new);
    let total = read_window(reader, Position::TOP, u64::MAX, 0, 0, Total::Count(builder.as_mut()))
        .map(|window| window.total_lines)
        .map_err(|error| path.io_error(error))?;
    if let Some(builder) = builder {
        builder.finish(total).remember(path);
    }
    Ok(total)
}

/// Up to `limit` bytes from the start of `file`, in as few host calls as the reads allow: a
/// read of a regular file that returns fewer bytes than asked has reached its end.
fn read_head(file: &mut crate::scan::FileReader, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut head = vec![0; usize::try_from(limit).unwrap_or(usize::MAX)];
    let mut filled = 0;
    while filled < head.len() {
        let wanted = head.len() - filled;
        let read = file.read(&mut head[filled..])?;
        filled += read;
        if read == 0 || read < wanted.min(64 * 1024) {
            break;
        }
    }
    head.truncate(filled);
    Ok(head)
}

/// Whether the byte before `offset` in `file` is a newline (or `offset` is 0): a recalled
/// line start still is one.
fn starts_a_line(file: &mut crate::scan::FileReader, offset: u64) -> std::io::Result<bool> {
    if offset == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(offset - 1))?;
    let mut byte = [0u8; 1];
    Ok(file.read(&mut byte)? == 1 && byte[0] == b'\n')
}

/// Where a reader stands in its file: how many lines lie before it, and at which byte.
#[derive(Debug, Clone, Copy)]
struct Position {
    line: u64,
    offset: u64,
}

impl Position {
    const TOP: Position = Position { line: 0, offset: 0 };
}

/// How a window learns the file's line count.
enum Total<'a> {
    /// By reading to the end, noting line starts in the index being built, if any.
    Count(Option<&'a mut IndexBuilder>),
    /// From the index: reading stops after the window.
    Known(u64),
}

struct Window {
    /// The numbered lines, joined by newlines.
    text: String,
    /// How many lines `text` holds.
    shown: u64,
    total_lines: u64,
    clipped_lines: usize,
    /// Lines shown with bytes that are not UTF-8 replaced by `U+FFFD`.
    undecodable_lines: usize,
    /// The window stopped early because the output reached its byte budget.
    hit_output_cap: bool,
    /// Bytes the lines take, each counted with a newline.
    output_bytes: usize,
}

impl Window {
    /// Count the line `raw` (with its newline, if it has one) and render it into the window,
    /// unless the output budget is spent.
    fn push_line(&mut self, raw: &[u8], max_output_bytes: usize) {
        self.total_lines += 1;
        let number = self.total_lines;
        let decoded = text::decode(raw);
        let undecodable = matches!(decoded, std::borrow::Cow::Owned(_));
        let mut line = decoded.trim_end_matches('\n').trim_end_matches('\r');
        if number == 1 {
            line = line.strip_prefix(text::BOM).unwrap_or(line);
        }
        let clipped = text::clip(line, MAX_LINE_CHARS);
        if matches!(clipped, std::borrow::Cow::Owned(_)) {
            self.clipped_lines += 1;
        }
        let number = usize::try_from(number).unwrap_or(usize::MAX);
        let length = text::numbered_len(number, &clipped);
        if self.output_bytes + length > max_output_bytes && self.shown > 0 {
            self.hit_output_cap = true;
            return;
        }
        if self.shown > 0 {
            self.text.push('\n');
        }
        text::push_numbered(&mut self.text, number, &clipped);
        self.undecodable_lines += usize::from(undecodable);
        self.output_bytes += length + 1;
        self.shown += 1;
    }
}

fn read_window(
    mut reader: impl BufRead,
    from: Position,
    start: u64,
    limit: u64,
    max_output_bytes: usize,
    mut total: Total<'_>,
) -> std::io::Result<Window> {
    let mut window = Window {
        text: String::new(),
        shown: 0,
        total_lines: from.line,
        clipped_lines: 0,
        undecodable_lines: 0,
        hit_output_cap: false,
        output_bytes: 0,
    };
    // A line longer than the reader's buffer is gathered here.
    let mut long_line = Vec::new();
    let end = start.saturating_add(limit);
    // Bytes of a line outside the window consumed since the last newline.
    let mut partial = false;
    // The byte offset of the reader's position.
    let mut offset = from.offset;
    loop {
        let next = window.total_lines + 1;
        let past_window = next >= end || window.hit_output_cap;
        if past_window && let Total::Known(known) = total {
            window.total_lines = known;
            break;
        }
        if next < start || past_window {
            // Outside the window lines are only counted: whole buffers are scanned for
            // newlines, nothing is copied.
            let buffer = reader.fill_buf()?;
            if buffer.is_empty() {
                window.total_lines += u64::from(partial);
                break;
            }
            let mut consumed = buffer.len();
            // A line in progress unless the buffer ends with its newline.
            partial = true;
            for newline in memchr::memchr_iter(b'\n', buffer) {
                window.total_lines += 1;
                partial = newline + 1 < buffer.len();
                if let Total::Count(Some(builder)) = &mut total {
                    builder.line_starts(window.total_lines + 1, offset + newline as u64 + 1);
                }
                let next = window.total_lines + 1;
                if next >= start && next < end && !window.hit_output_cap {
                    consumed = newline + 1;
                    partial = false;
                    break;
                }
            }
            reader.consume(consumed);
            offset += consumed as u64;
            continue;
        }
        // A line inside the window: rendered from the reader's buffer when it holds the whole
        // line (nearly always), else gathered first.
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            if let Total::Known(known) = total {
                window.total_lines = known;
            }
            break;
        }
        let length = if let Some(newline) = memchr::memchr(b'\n', buffer) {
            window.push_line(&buffer[..=newline], max_output_bytes);
            reader.consume(newline + 1);
            newline + 1
        } else {
            long_line.clear();
            reader.read_until(b'\n', &mut long_line)?;
            window.push_line(&long_line, max_output_bytes);
            long_line.len()
        };
        offset += length as u64;
        if let Total::Count(Some(builder)) = &mut total {
            builder.line_starts(window.total_lines + 1, offset);
        }
    }
    Ok(window)
}

fn render(path: &WorkspacePath, start: u64, window: Window, max_output_bytes: usize, encoding: TextEncoding) -> Result<Output, ToolError> {
    let shown = window.shown;
    if window.total_lines == 0 {
        let mut structured = json!({
            "path": path.as_str(),
            "start_line": 0,
            "end_line": 0,
            "total_lines": 0,
            "truncated": false,
            "clipped_lines": 0,
        });
        encoding.annotate(&mut structured);
        return Ok(Output::text(format!("{} is empty (0 lines).", quote(path.as_str()))).with_structured(structured));
    }
    if start > window.total_lines {
        return Err(ToolError::InvalidArgs(format!(
            "offset {start} is past the end of {}, which has {} lines: use an offset from 1 to {}",
            quote(path.as_str()),
            window.total_lines,
            window.total_lines
        )));
    }
    let end = start + shown - 1;
    let more_after = end < window.total_lines;
    let truncated = more_after || window.clipped_lines > 0;
    let mut text = window.text;
    if more_after || start > 1 {
        text.push_str(&format!("\n\n[lines {start}-{end} of {}", window.total_lines));
        if more_after {
            text.push_str(&format!("; to read on, call read_file with offset {}", end + 1));
        }
        if window.hit_output_cap {
            text.push_str(&format!("; this window stopped at {} KiB of text", max_output_bytes / 1024));
        }
        text.push(']');
    }
    if window.clipped_lines > 0 {
        text.push_str(&format!("\n[{} line(s) longer than {MAX_LINE_CHARS} characters were cut]", window.clipped_lines));
    }
    if !encoding.is_utf8() {
        text.push_str(&format!(
            "\n[encoding: {}; shown here as Unicode, and edit_file, insert_text and write_file keep the file in it]",
            encoding.describe()
        ));
    }
    if window.undecodable_lines > 0 {
        text.push_str(&format!("\n[{} line(s) shown hold bytes that are not valid UTF-8, shown as U+FFFD]", window.undecodable_lines));
    }
    let mut structured = json!({
        "path": path.as_str(),
        "start_line": start,
        "end_line": end,
        "total_lines": window.total_lines,
        "truncated": truncated,
        "clipped_lines": window.clipped_lines,
    });
    if more_after {
        structured["next_offset"] = json!(end + 1);
    }
    encoding.annotate(&mut structured);
    if window.undecodable_lines > 0 {
        structured["undecodable_lines"] = json!(window.undecodable_lines);
    }
    Ok(Output::text(text).with_structured(structured))
}

#[cfg(test)]
mod tests {
    use super::line_index::MAX_INDEX_STARTS;
    use super::*;

    fn window(content: &str, start: u64, limit: u64) -> Window {
        read_window(std::io::Cursor::new(content.as_bytes().to_vec()), Position::TOP, start, limit, 1 << 20, Total::Count(None))
            .expect("in-memory read")
    }

    #[test]
    fn windows_count_every_line() {
        let content = "a\nb\r\nc\nd";
        let all = window(content, 1, 10);
        assert_eq!(all.total_lines, 4);
        assert_eq!(all.text, ["     1\ta", "     2\tb", "     3\tc", "     4\td"].join("\n"));
        assert_eq!(all.shown, 4);
        let middle = window(content, 2, 2);
        assert_eq!(middle.total_lines, 4);
        assert_eq!(middle.text, ["     2\tb", "     3\tc"].join("\n"));
        assert_eq!(middle.shown, 2);
    }

    #[test]
    fn counting_outside_the_window_matches_line_by_line_reading() {
        let long = "x\n".repeat(50);
        let contents = ["", "a", "a\n", "a\nb", "a\nb\n", "\n\n\n", "one\ntwo\r\nthree\nfour", long.as_str()];
        for content in contents {
            let expected = content.lines().count() as u64;
            for capacity in [1, 2, 3, 7, 64] {
                for (start, limit) in [(1, 1), (2, 1), (1, 100), (3, 2), (40, 5), (100, 1)] {
                    let reader = BufReader::with_capacity(capacity, std::io::Cursor::new(content.as_bytes().to_vec()));
                    let got = read_window(reader, Position::TOP, start, limit, 1 << 20, Total::Count(None)).expect("in-memory read");
                    assert_eq!(got.total_lines, expected, "{content:?} capacity {capacity} window {start}+{limit}");
                    let wanted: Vec<String> = content
                        .lines()
                        .enumerate()
                        .skip(usize::try_from(start - 1).unwrap_or(0))
                        .take(usize::try_from(limit).unwrap_or(0))
                        .map(|(index, line)| text::numbered(index + 1, line))
                        .collect();
                    assert_eq!(got.text, wanted.join("\n"), "{content:?} capacity {capacity} window {start}+{limit}");
                    assert_eq!(got.shown, wanted.len() as u64, "{content:?} capacity {capacity} window {start}+{limit}");
                }
            }
        }
    }

    #[test]
    fn the_output_budget_stops_the_window_but_not_the_count() {
        // Each rendered line is 6 + 1 + 3 bytes, plus its newline.
        let content = "aaa\nbbb\nccc\nddd\n";
        let capped = read_window(std::io::Cursor::new(content.as_bytes().to_vec()), Position::TOP, 1, 100, 25, Total::Count(None))
            .expect("in-memory read");
        assert_eq!(capped.text, "     1\taaa\n     2\tbbb");
        assert_eq!((capped.shown, capped.total_lines, capped.hit_output_cap), (2, 4, true));
        // The first line is always shown, whatever the budget.
        let tiny = read_window(std::io::Cursor::new(content.as_bytes().to_vec()), Position::TOP, 3, 100, 1, Total::Count(None))
            .expect("in-memory read");
        assert_eq!((tiny.text.as_str(), tiny.shown, tiny.total_lines), ("     3\tccc", 1, 4));
    }

    /// The index of `content` built by reading it from the top, with line starts every
    /// `stride` lines.
    fn index_of(content: &str, stride: u64) -> LineIndex {
        let fingerprint = Fingerprint { size: content.len() as u64, modified_seconds: 1, modified_nanos: 2 };
        let mut builder = IndexBuilder { fingerprint, stride, starts: vec![0] };
        let reader = BufReader::with_capacity(7, std::io::Cursor::new(content.as_bytes().to_vec()));
        let total = read_window(reader, Position::TOP, 3, 4, 1 << 20, Total::Count(Some(&mut builder))).expect("read").total_lines;
        builder.finish(total)
    }

    #[test]
    fn windows_from_a_recorded_line_start_match_reading_from_the_top() {
        let content: String = (1..=500).map(|n| format!("{n}{}\n", "-".repeat(n % 13))).collect();
        for content in [content.clone(), format!("{content}no final newline")] {
            let index = index_of(&content, 16);
            assert_eq!(index.total_lines, content.lines().count() as u64);
            for (position, start) in index.starts.iter().enumerate() {
                // Each recorded start is the start of line `position * stride + 1`.
                let line = content.lines().nth(position * 16).expect("the line exists");
                assert!(content[usize::try_from(*start).expect("offset")..].starts_with(line), "start {position}");
            }
            for (start, limit) in [(1, 5), (16, 3), (17, 1), (250, 40), (495, 10), (501, 2)] {
                let from_top = window(&content, start, limit);
                let checkpoint = usize::try_from((start - 1) / index.stride).expect("index").min(index.starts.len() - 1);
                let offset = index.starts[checkpoint];
                let mut cursor = std::io::Cursor::new(content.as_bytes().to_vec());
                cursor.set_position(offset);
                let position = Position { line: checkpoint as u64 * index.stride, offset };
                let indexed =
                    read_window(BufReader::with_capacity(5, cursor), position, start, limit, 1 << 20, Total::Known(index.total_lines))
                        .expect("read");
                assert_eq!(
                    (indexed.text.as_str(), indexed.shown, indexed.total_lines),
                    (from_top.text.as_str(), from_top.shown, from_top.total_lines),
                    "window {start}+{limit}"
                );
            }
        }
    }

    #[test]
    fn an_index_stays_small_and_survives_encoding_but_not_damage() {
        let fingerprint = Fingerprint { size: u64::MAX, modified_seconds: 7, modified_nanos: 8 };
        let mut builder = IndexBuilder::new(fingerprint);
        let lines = 40_000_000_u64;
        for line in 2..=lines {
            builder.line_starts(line, line * 10);
        }
        let index = builder.finish(lines);
        assert!(index.starts.len() <= MAX_INDEX_STARTS, "{}", index.starts.len());
        assert_eq!(index.starts[1], (index.stride + 1) * 10, "each start is of line k * stride + 1");
        let encoded = index.encode();
        assert!(encoded.len() <= 64 * 1024, "{}", encoded.len());
        assert_eq!(LineIndex::decode(&encoded), Some(index));
        assert_eq!(LineIndex::decode(&encoded[..encoded.len() - 3]), None);
        assert_eq!(LineIndex::decode(b"tclines0"), None);
        let mut unordered = encoded.clone();
        let last = unordered.len() - 8;
        unordered[last..].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(LineIndex::decode(&unordered), None);
    }

    #[test]
    fn bom_is_not_shown() {
        assert_eq!(window("\u{feff}x\n", 1, 10).text, "     1\tx");
    }
}
