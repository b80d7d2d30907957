//! Text helpers shared by the file tools: binary detection, documents in their encoding,
//! numbered lines, clipping.

use crate::encoding::{self, TextEncoding, Unencodable};

/// How many leading bytes [`is_binary`] inspects.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Whether content looks binary: a NUL byte in its first [`BINARY_SNIFF_BYTES`] bytes (the
/// rule git and ripgrep use).
pub fn is_binary(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)]).is_some()
}

/// `bytes` as text, invalid UTF-8 sequences replaced by `U+FFFD`. Valid text (nearly always)
/// is checked by the standard library's fast validator and borrowed.
pub fn decode(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// A line in `cat -n` style: the 1-based number right-aligned in six columns, a tab, the text.
pub fn numbered(number: usize, line: &str) -> String {
    let mut out = String::with_capacity(numbered_len(number, line));
    push_numbered(&mut out, number, line);
    out
}

/// The length of [`numbered`]`(number, line)`.
pub fn numbered_len(number: usize, line: &str) -> usize {
    let digits = number.checked_ilog10().map_or(1, |log| log as usize + 1);
    digits.max(6) + 1 + line.len()
}

/// Append [`numbered`]`(number, line)` to `out`, without the formatting machinery (this runs
/// for every line a read returns).
pub fn push_numbered(out: &mut String, number: usize, line: &str) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = number;
    loop {
        start -= 1;
        // `rest % 10` is below 10.
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let written = &digits[start..];
    for _ in written.len()..6 {
        out.push(' ');
    }
    out.extend(written.iter().map(|digit| char::from(*digit)));
    out.push('\t');
    out.push_str(line);
}

/// `line` cut to at most `max_chars` characters, with a marker saying how much was cut.
pub fn clip(line: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    // A character is at least one byte: a line of no more bytes than that needs no counting.
    if line.len() <= max_chars {
        return std::borrow::Cow::Borrowed(line);
    }
    match line.char_indices().nth(max_chars) {
        None => std::borrow::Cow::Borrowed(line),
        Some((cut, _)) => {
            let rest = line[cut..].chars().count();
            std::borrow::Cow::Owned(format!("{}… [line truncated: {rest} more characters]", &line[..cut]))
        }
    }
}

/// The UTF-8 byte-order mark.
pub const BOM: &str = "\u{feff}";

/// Split text into lines the way editors count them: on `\n`, with a trailing `\r` removed
/// from each line; a final newline does not start another line.
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
}

/// [`lines`] over raw bytes, which need not be UTF-8: searches match lines before decoding
/// them.
pub fn byte_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match memchr::memchr(b'\n', rest) {
            Some(end) => {
                let line = &rest[..end];
                rest = &rest[end + 1..];
                Some(line.strip_suffix(b"\r").unwrap_or(line))
            }
            // A last line without a newline keeps a final `\r`, as `str::lines` does.
            None => Some(std::mem::take(&mut rest)),
        }
    })
}

/// A text file split into what edits see (LF line endings, no byte-order mark, UTF-8) and
/// how to write it back (its encoding, byte-order mark and line endings).
pub struct Document {
    /// The file's encoding and byte-order mark.
    pub encoding: TextEncoding,
    /// Every line ends with CRLF.
    pub crlf: bool,
    /// The text with LF line endings and no byte-order mark.
    pub body: String,
}

/// Why a file's bytes are not a [`Document`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotText {
    /// They look binary.
    Binary,
    /// They are mostly text in this encoding, with bytes that do not decode (or would not be
    /// written back the same): an edit would lose them.
    Undecodable(TextEncoding),
}

impl NotText {
    /// The `unsupported` error `tool` (`edit_file`) gives for `path`.
    pub fn to_error(self, path: &crate::WorkspacePath, tool: &str) -> crate::ToolError {
        let path = crate::path::quote(path.as_str());
        crate::ToolError::Unsupported(match self {
            NotText::Binary => {
                format!(
                    "{path} looks like a binary file (it has a NUL byte in its first 8 KiB): {tool} only changes text files. Nothing was changed."
                )
            }
            NotText::Undecodable(encoding) => format!(
                "{path} is mostly {} text but has bytes that are not (read_file shows them as U+FFFD): {tool} would lose them, so it changes nothing; replace the whole file with write_file if that is what you want. Nothing was changed.",
                encoding.name()
            ),
        })
    }
}

impl Document {
    /// Split `original`, UTF-8 text (a leading `U+FEFF` is its byte-order mark).
    pub fn parse(original: &str) -> Self {
        let (bom, text) = match original.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, original),
        };
        Self::split(TextEncoding { bom, ..TextEncoding::UTF_8 }, text)
    }

    /// The document a file's `bytes` hold, in the encoding they are detected to be in.
    ///
    /// # Errors
    ///
    /// [`NotText`] if they are binary, or do not decode exactly.
    pub fn decode(bytes: &[u8]) -> Result<Self, NotText> {
        let encoding = encoding::detect(bytes, true).ok_or(NotText::Binary)?;
        let text = encoding::decode_exact(bytes, encoding).ok_or(NotText::Undecodable(encoding))?;
        Ok(Self::split(encoding, &text))
    }

    fn split(encoding: TextEncoding, text: &str) -> Self {
        // A file counts as CRLF only if every newline is CRLF; a mixed file is edited as is.
        let newlines = text.matches('\n').count();
        let crlf = newlines > 0 && text.matches("\r\n").count() == newlines;
        let body = if crlf { text.replace("\r\n", "\n") } else { text.to_owned() };
        Document { encoding, crlf, body }
    }

    /// The edited `body` with the file's line endings put back (no byte-order mark).
    pub fn text(&self, body: &str) -> String {
        if self.crlf { body.replace('\n', "\r\n") } else { body.to_owned() }
    }

    /// The bytes to write for the edited `body`: the line endings, encoding and byte-order
    /// mark put back.
    ///
    /// # Errors
    ///
    /// The first character the file's encoding cannot hold.
    pub fn render(&self, body: &str) -> Result<Vec<u8>, Unencodable> {
        encoding::encode(&self.text(body), self.encoding)
    }

    /// `crlf` or `lf`, as results name them.
    pub fn line_endings(&self) -> &'static str {
        if self.crlf { "crlf" } else { "lf" }
    }
}

/// The 1-based line number of byte offset `at` (which may fall inside a character: the last
/// byte of a region is one).
pub fn line_of(content: &str, at: usize) -> usize {
    memchr::memchr_iter(b'\n', &content.as_bytes()[..at]).count() + 1
}

/// Numbered excerpts made by [`snippets`].
pub struct Snippets {
    /// The excerpts shown, in order.
    pub shown: Vec<String>,
    /// Excerpts left out past the maximum.
    pub hidden: usize,
}

/// How [`snippets`] shows regions.
#[derive(Debug, Clone, Copy)]
pub struct SnippetStyle {
    /// Lines of context before and after each region.
    pub context_lines: usize,
    /// Excerpts shown; the rest are counted.
    pub max_shown: usize,
    /// Longer lines are cut.
    pub max_line_chars: usize,
}

/// Numbered excerpts of `content` around the byte ranges `regions` (sorted), with context,
/// overlapping excerpts merged.
pub fn snippets(content: &str, regions: &[(usize, usize)], style: SnippetStyle) -> Snippets {
    let lines: Vec<&str> = lines(content).collect();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &(start, end) in regions {
        let first = line_of(content, start);
        // The line holding the region's last byte (its start, for a deletion).
        let last = line_of(content, if end > start { end - 1 } else { start });
        let from = first.saturating_sub(style.context_lines).max(1);
        let to = (last + style.context_lines).min(lines.len().max(1));
        match ranges.last_mut() {
            Some(previous) if from <= previous.1 + 1 => previous.1 = previous.1.max(to),
            _ => ranges.push((from, to)),
        }
    }
    let hidden = ranges.len().saturating_sub(style.max_shown);
    let shown = ranges
        .iter()
        .take(style.max_shown)
        .map(|&(from, to)| {
            if lines.is_empty() {
                return "(the file is now empty)".to_owned();
            }
            (from..=to)
                .filter_map(|number| lines.get(number - 1).map(|line| numbered(number, &clip(line, style.max_line_chars))))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    Snippets { shown, hidden }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_detection() {
        assert!(!is_binary(b"plain text\n"));
        assert!(is_binary(b"a\0b"));
        let mut late_nul = vec![b'a'; BINARY_SNIFF_BYTES];
        late_nul.push(0);
        assert!(!is_binary(&late_nul));
    }

    #[test]
    fn decoding_borrows_valid_text_and_replaces_invalid_bytes() {
        assert!(matches!(decode("héllo".as_bytes()), std::borrow::Cow::Borrowed("héllo")));
        assert_eq!(decode(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(decode(b"\xe9t\xe9"), "\u{fffd}t\u{fffd}");
    }

    #[test]
    fn byte_lines_split_as_text_lines_do() {
        for text in ["", "a", "a\n", "a\nb", "a\r\nb\r\n", "\n\n", "a\rb\n", "\r\n", "x\r", "é\nü\r\n\n"] {
            let expected: Vec<&[u8]> = lines(text).map(str::as_bytes).collect();
            let split: Vec<&[u8]> = byte_lines(text.as_bytes()).collect();
            assert_eq!(split, expected, "{text:?}");
        }
        let split: Vec<&[u8]> = byte_lines(b"a\xff\nb").collect();
        assert_eq!(split, [&b"a\xff"[..], b"b"]);
    }

    #[test]
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 3), "abc… [line truncated: 3 more characters]");
        assert_eq!(clip("ééééé", 2), "éé… [line truncated: 3 more characters]");
        assert_eq!(clip("éé", 2), "éé", "two characters in four bytes");
        assert_eq!(clip("ééé", 3), "ééé");
    }

    #[test]
    fn numbering() {
        assert_eq!(numbered(7, "x"), "     7\tx");
        assert_eq!(numbered(1234567, "x"), "1234567\tx");
        for number in [0, 1, 9, 10, 99_999, 100_000, 999_999, 1_000_000, usize::MAX] {
            let line = "some text";
            assert_eq!(numbered(number, line), format!("{number:>6}\t{line}"));
            assert_eq!(numbered_len(number, line), numbered(number, line).len());
        }
    }
}

/// `count` and the noun that goes with it: `1 line`, `2 lines`.
pub fn counted(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

#[cfg(test)]
mod document_tests {
    use super::*;

    #[test]
    fn documents_in_other_encodings_round_trip() {
        let latin1: &[u8] = b"Gr\xfc\xdfe aus K\xf6ln\ncaf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve fa\xe7ade\n";
        let document = Document::decode(latin1).expect("latin-1 text");
        assert_eq!(document.encoding.name(), "windows-1252");
        let edited = document.body.replace("café", "thé");
        assert_eq!(
            document.render(&edited).expect("encodable"),
            b"Gr\xfc\xdfe aus K\xf6ln\nth\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve fa\xe7ade\n"
        );
    }

    #[test]
    fn a_region_may_end_inside_a_character() {
        // "thé" ends with a two-byte character: its last byte is not a character boundary.
        let content = "a\nthé\nb\n";
        let end = content.find('é').expect("é") + 2;
        assert_eq!(line_of(content, end - 1), 2);
        let shown = snippets(content, &[(2, end)], SnippetStyle { context_lines: 0, max_shown: 1, max_line_chars: 80 }).shown;
        assert_eq!(shown, ["     2\tthé"]);
    }
}
