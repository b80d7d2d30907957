//! Reading a window of a text file as numbered lines: what `read_file` and `read_many` return.

use std::io::{BufRead, BufReader, Read};

use serde_json::json;

use crate::path::quote;
use crate::text::{self, BINARY_SNIFF_BYTES};
use crate::{Output, ToolError, WorkspacePath};

/// Lines returned when the caller gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut, with a marker.
pub const MAX_LINE_CHARS: usize = 2000;

/// Read lines `offset..offset + limit` (1-based; defaults 1 and [`DEFAULT_LIMIT`]) of the text
/// file `path`, numbered `cat -n` style, the text stopping once it reaches `max_output_bytes`.
///
/// # Errors
///
/// `not-found`, `denied` (the host refused), `unsupported` for a directory, a special file or
/// a binary file, `invalid-args` for an offset past the end.
pub fn read_lines(path: &WorkspacePath, offset: Option<u64>, limit: Option<u64>, max_output_bytes: usize) -> Result<Output, ToolError> {
    let start = offset.unwrap_or(1);
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    // Look before opening: opening a FIFO would block until a writer appears.
    let metadata = std::fs::metadata(path.as_str()).map_err(|error| path.io_error(error))?;
    if metadata.is_dir() {
        return Err(ToolError::Unsupported(format!(
            "{} is a directory, not a file: use `list_files` to see what it holds",
            quote(path.as_str())
        )));
    }
    if !metadata.is_file() {
        return Err(ToolError::Unsupported(format!(
            "{} is not a regular file (it is a FIFO, socket or device): only regular files can be read",
            quote(path.as_str())
        )));
    }
    let mut file = std::fs::File::open(path.as_str()).map_err(|error| path.io_error(error))?;
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file).take(BINARY_SNIFF_BYTES as u64).read_to_end(&mut head).map_err(|error| path.io_error(error))?;
    if text::is_binary(&head) {
        return Err(ToolError::Unsupported(format!(
            "{} looks like a binary file (it has a NUL byte in its first 8 KiB): only text files can be read",
            quote(path.as_str())
        )));
    }
    let window = read_window(
        // Big enough for a few host calls per MiB, small enough that a small file's call does
        // not grow the component's memory.
        BufReader::with_capacity(
            usize::try_from(metadata.len()).unwrap_or(usize::MAX).clamp(4 * 1024, 64 * 1024),
            std::io::Cursor::new(head).chain(file),
        ),
        start,
        limit,
        max_output_bytes,
    )
    .map_err(|error| path.io_error(error))?;
    render(path, start, window, max_output_bytes)
}

/// The lines of one `read_file` window, rendered, and what was counted around it.
/// How many lines the regular file at `path` has (a last line without a newline counts), for
/// reading its tail. Counted in whole buffers; nothing is decoded.
///
/// # Errors
///
/// The path's error, as [`read_lines`] would report it.
pub fn count_lines(path: &WorkspacePath) -> Result<u64, ToolError> {
    let metadata = std::fs::metadata(path.as_str()).map_err(|error| path.io_error(error))?;
    if !metadata.is_file() {
        // `read_lines` says what it is instead.
        return Ok(0);
    }
    let file = std::fs::File::open(path.as_str()).map_err(|error| path.io_error(error))?;
    let reader = BufReader::with_capacity(64 * 1024, file);
    read_window(reader, u64::MAX, 0, 0).map(|window| window.total_lines).map_err(|error| path.io_error(error))
}

struct Window {
    /// The numbered lines, joined by newlines.
    text: String,
    /// How many lines `text` holds.
    shown: u64,
    total_lines: u64,
    clipped_lines: usize,
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
        self.output_bytes += length + 1;
        self.shown += 1;
    }
}

fn read_window(mut reader: impl BufRead, start: u64, limit: u64, max_output_bytes: usize) -> std::io::Result<Window> {
    let mut window = Window { text: String::new(), shown: 0, total_lines: 0, clipped_lines: 0, hit_output_cap: false, output_bytes: 0 };
    // A line longer than the reader's buffer is gathered here.
    let mut long_line = Vec::new();
    let end = start.saturating_add(limit);
    // Bytes of a line outside the window consumed since the last newline.
    let mut partial = false;
    loop {
        let next = window.total_lines + 1;
        if next < start || next >= end || window.hit_output_cap {
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
                let next = window.total_lines + 1;
                if next >= start && next < end && !window.hit_output_cap {
                    consumed = newline + 1;
                    partial = false;
                    break;
                }
            }
            reader.consume(consumed);
            continue;
        }
        // A line inside the window: rendered from the reader's buffer when it holds the whole
        // line (nearly always), else gathered first.
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        if let Some(newline) = memchr::memchr(b'\n', buffer) {
            window.push_line(&buffer[..=newline], max_output_bytes);
            reader.consume(newline + 1);
            continue;
        }
        long_line.clear();
        reader.read_until(b'\n', &mut long_line)?;
        window.push_line(&long_line, max_output_bytes);
    }
    Ok(window)
}

fn render(path: &WorkspacePath, start: u64, window: Window, max_output_bytes: usize) -> Result<Output, ToolError> {
    let shown = window.shown;
    if window.total_lines == 0 {
        return Ok(Output::text(format!("{} is empty (0 lines).", quote(path.as_str()))).with_structured(json!({
            "path": path.as_str(),
            "start_line": 0,
            "end_line": 0,
            "total_lines": 0,
            "truncated": false,
            "clipped_lines": 0,
        })));
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
    Ok(Output::text(text).with_structured(structured))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(content: &str, start: u64, limit: u64) -> Window {
        read_window(std::io::Cursor::new(content.as_bytes().to_vec()), start, limit, 1 << 20).expect("in-memory read")
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
                    let got = read_window(reader, start, limit, 1 << 20).expect("in-memory read");
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
        let capped = read_window(std::io::Cursor::new(content.as_bytes().to_vec()), 1, 100, 25).expect("in-memory read");
        assert_eq!(capped.text, "     1\taaa\n     2\tbbb");
        assert_eq!((capped.shown, capped.total_lines, capped.hit_output_cap), (2, 4, true));
        // The first line is always shown, whatever the budget.
        let tiny = read_window(std::io::Cursor::new(content.as_bytes().to_vec()), 3, 100, 1).expect("in-memory read");
        assert_eq!((tiny.text.as_str(), tiny.shown, tiny.total_lines), ("     3\tccc", 1, 4));
    }

    #[test]
    fn bom_is_not_shown() {
        assert_eq!(window("\u{feff}x\n", 1, 10).text, "     1\tx");
    }
}
