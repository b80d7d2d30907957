//! Text encodings: which one a file is written in, decoding it for the agent, and encoding
//! edited text back into it, so that a Latin-1 or UTF-16 file stays one.
//!
//! Detection, in order: a byte-order mark (UTF-8, UTF-16LE, UTF-16BE); UTF-16 without one
//! where the NUL bytes leave no doubt; binary (a NUL byte in the first 8 KiB); UTF-8; mostly
//! UTF-8 with a few bad bytes; else the legacy encoding `chardetng` guesses.

use std::io::Read;

pub use encoding_rs::Encoding;

use crate::text::BINARY_SNIFF_BYTES;

/// The encoding a text file is written in, and whether it starts with a byte-order mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextEncoding {
    /// The encoding (`encoding_rs`'s, which names it).
    pub encoding: &'static Encoding,
    /// The file starts with the encoding's byte-order mark.
    pub bom: bool,
}

impl Default for TextEncoding {
    fn default() -> Self {
        TextEncoding::UTF_8
    }
}

impl TextEncoding {
    /// UTF-8 without a byte-order mark: what new files are written in.
    pub const UTF_8: TextEncoding = TextEncoding { encoding: encoding_rs::UTF_8, bom: false };

    /// The encoding's name as results give it: lower case, `utf-8`, `utf-16le`, `windows-1252`.
    pub fn name(&self) -> String {
        self.encoding.name().to_ascii_lowercase()
    }

    /// Whether this is UTF-8 (with or without a byte-order mark).
    pub fn is_utf8(&self) -> bool {
        self.encoding == encoding_rs::UTF_8
    }

    /// Whether this is UTF-16 (either byte order).
    pub fn is_utf16(&self) -> bool {
        self.encoding == encoding_rs::UTF_16LE || self.encoding == encoding_rs::UTF_16BE
    }

    /// The byte-order mark's bytes, if the file has one.
    pub fn bom_bytes(&self) -> &'static [u8] {
        match (self.bom, self.encoding.name()) {
            (false, _) => b"",
            (true, "UTF-16LE") => b"\xFF\xFE",
            (true, "UTF-16BE") => b"\xFE\xFF",
            (true, _) => b"\xEF\xBB\xBF",
        }
    }

    /// How a result's text names it: `windows-1252`, `utf-16le with a byte-order mark`.
    pub fn describe(&self) -> String {
        if self.bom { format!("{} with a byte-order mark", self.name()) } else { self.name() }
    }

    /// Whether a result should mention it: anything but UTF-8 without a byte-order mark.
    pub fn is_notable(&self) -> bool {
        *self != TextEncoding::UTF_8
    }

    /// Add `encoding` (when not UTF-8) and `bom` (when there is one) to a structured result.
    pub fn annotate(&self, structured: &mut serde_json::Value) {
        if !self.is_utf8() {
            structured["encoding"] = serde_json::json!(self.name());
        }
        if self.bom {
            structured["bom"] = serde_json::json!(true);
        }
    }

    /// The encoding named by `label` (`utf-8`, `latin1`, `windows-1252`, `utf-16le`,
    /// `shift_jis`: the WHATWG labels), a UTF-16 one with a byte-order mark.
    ///
    /// # Errors
    ///
    /// `invalid-args` naming the label if it names no encoding that can be written.
    pub fn from_label(label: &str) -> Result<TextEncoding, crate::ToolError> {
        match Encoding::for_label(label.trim().as_bytes()) {
            Some(encoding) if encoding != encoding_rs::REPLACEMENT => {
                let bom = encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE;
                Ok(TextEncoding { encoding, bom })
            }
            _ => Err(crate::ToolError::InvalidArgs(format!(
                "`encoding` {} is not an encoding files can be written in: use a name such as `utf-8`, `utf-16le`, `utf-16be`, `windows-1252` (Latin-1), `iso-8859-15` or `shift_jis`",
                crate::path::quote(label)
            ))),
        }
    }
}

/// What `bytes` (a whole file if `complete`, else its first bytes) are written in, or `None`
/// if they look binary.
pub fn detect(bytes: &[u8], complete: bool) -> Option<TextEncoding> {
    if let Some((encoding, bom_length)) = Encoding::for_bom(bytes) {
        let bom = TextEncoding { encoding, bom: true };
        if encoding == encoding_rs::UTF_8 {
            return (!has_nul(bytes)).then_some(bom);
        }
        // UTF-16 text has no NUL code unit (UTF-32's byte-order mark starts like UTF-16LE's).
        return (!has_nul_unit(&bytes[bom_length..])).then_some(bom);
    }
    // UTF-16 without a byte-order mark has NUL bytes in its sample (a part of the one
    // `has_nul` looks at), so text with none is not looked at as UTF-16.
    if has_nul(bytes) {
        return utf16_without_bom(bytes, complete).map(|encoding| TextEncoding { encoding, bom: false });
    }
    let valid_up_to = match std::str::from_utf8(bytes) {
        Ok(_) => return Some(TextEncoding::UTF_8),
        Err(error) => error.valid_up_to(),
    };
    // A head may end inside a character.
    if !complete
        && bytes.len() - valid_up_to < 4
        && std::str::from_utf8(&bytes[valid_up_to..]).err().is_some_and(|e| e.error_len().is_none())
    {
        return Some(TextEncoding::UTF_8);
    }
    if is_mostly_utf8(bytes) {
        return Some(TextEncoding::UTF_8);
    }
    let mut detector = chardetng::EncodingDetector::new();
    detector.feed(bytes, complete);
    Some(TextEncoding { encoding: detector.guess(None, false), bom: false })
}

/// A NUL byte among the first [`BINARY_SNIFF_BYTES`]: the binary rule git and ripgrep use.
fn has_nul(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)]).is_some()
}

/// A NUL code unit among the first [`BINARY_SNIFF_BYTES`] of UTF-16 `bytes`.
fn has_nul_unit(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].chunks_exact(2).any(|unit| unit == [0, 0])
}

/// UTF-16 without a byte-order mark, where it is clear: an even length, at least four units,
/// every other byte zero in at least half of them (ASCII in UTF-16) and no zero in the other
/// position, well-formed, and no control character but tab, newline, form feed and CR.
fn utf16_without_bom(bytes: &[u8], complete: bool) -> Option<&'static Encoding> {
    if complete && bytes.len() % 2 == 1 {
        return None;
    }
    let sample = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES) & !1];
    let units = sample.len() / 2;
    if units < 4 {
        return None;
    }
    let zero_low = sample.chunks_exact(2).filter(|unit| unit[0] == 0).count();
    let zero_high = sample.chunks_exact(2).filter(|unit| unit[1] == 0).count();
    let encoding = if zero_low == 0 && zero_high * 2 >= units {
        encoding_rs::UTF_16LE
    } else if zero_high == 0 && zero_low * 2 >= units {
        encoding_rs::UTF_16BE
    } else {
        return None;
    };
    // A head may end inside a surrogate pair: only the sample's whole pairs are checked.
    let checked = if sample.len() == bytes.len() { sample } else { &sample[..sample.len().saturating_sub(2)] };
    let text = encoding.decode_without_bom_handling_and_without_replacement(checked)?;
    let is_text = text.chars().all(|character| !character.is_control() || matches!(character, '\t' | '\n' | '\r' | '\x0c'));
    is_text.then_some(encoding)
}

/// UTF-8 with a few bad bytes: more well-formed multi-byte characters than bad sequences.
/// (Latin-1 text rarely forms a valid UTF-8 sequence by chance.)
fn is_mostly_utf8(bytes: &[u8]) -> bool {
    let mut valid = 0usize;
    let mut invalid = 0usize;
    for chunk in bytes.utf8_chunks() {
        valid += chunk.valid().chars().filter(|c| !c.is_ascii()).count();
        invalid += usize::from(!chunk.invalid().is_empty());
    }
    valid > invalid
}

/// `bytes` as text, bad sequences replaced by `U+FFFD`, the byte-order mark left out; and
/// whether any was replaced.
pub fn decode_lossy(bytes: &[u8], encoding: TextEncoding) -> (String, bool) {
    let body = &bytes[encoding.bom_bytes().len().min(bytes.len())..];
    let (text, had_errors) = encoding.encoding.decode_without_bom_handling(body);
    (text.into_owned(), had_errors)
}

/// `bytes` as text in `encoding`, the byte-order mark left out, if they decode without a bad
/// sequence and encode back to the same bytes (so that an edit changes only what it edits).
pub fn decode_exact(bytes: &[u8], encoding: TextEncoding) -> Option<String> {
    let body = bytes.get(encoding.bom_bytes().len()..)?;
    let text = encoding.encoding.decode_without_bom_handling_and_without_replacement(body)?.into_owned();
    if !encoding.is_utf8() && !encoding.is_utf16() && encode(&text, encoding).ok()?.get(encoding.bom_bytes().len()..)? != body {
        return None;
    }
    Some(text)
}

/// A character that the target encoding cannot hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unencodable {
    /// The character.
    pub character: char,
    /// Its 1-based line in the text being encoded.
    pub line: usize,
    /// The encoding.
    pub encoding: TextEncoding,
}

impl Unencodable {
    /// The `invalid-args` error an agent sees for writing it to `path`.
    pub fn to_error(&self, path: &crate::WorkspacePath) -> crate::ToolError {
        let name = self.encoding.name();
        crate::ToolError::InvalidArgs(format!(
            "the character `{}` (U+{:04X}) on line {} cannot be written in {name}, the encoding of {}: use characters {name} can hold (an ASCII spelling, for example), or convert the whole file with write_file and `encoding: \"utf-8\"`. Nothing was written.",
            self.character,
            u32::from(self.character),
            self.line,
            crate::path::quote(path.as_str())
        ))
    }
}

/// `text` in `encoding`, with its byte-order mark if it has one.
///
/// # Errors
///
/// The first character the encoding cannot hold.
pub fn encode(text: &str, encoding: TextEncoding) -> Result<Vec<u8>, Unencodable> {
    let mut out = Vec::with_capacity(text.len() + 3);
    out.extend_from_slice(encoding.bom_bytes());
    if encoding.is_utf8() {
        out.extend_from_slice(text.as_bytes());
        return Ok(out);
    }
    if encoding.is_utf16() {
        let little = encoding.encoding == encoding_rs::UTF_16LE;
        for unit in text.encode_utf16() {
            out.extend_from_slice(&if little { unit.to_le_bytes() } else { unit.to_be_bytes() });
        }
        return Ok(out);
    }
    let mut encoder = encoding.encoding.new_encoder();
    let mut rest = text;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let (result, read, written) = encoder.encode_from_utf8_without_replacement(rest, &mut buffer, true);
        out.extend_from_slice(&buffer[..written]);
        let consumed = text.len() - rest.len() + read;
        rest = &rest[read..];
        match result {
            encoding_rs::EncoderResult::InputEmpty => return Ok(out),
            encoding_rs::EncoderResult::OutputFull => {}
            encoding_rs::EncoderResult::Unmappable(character) => {
                let line = text[..consumed].matches('\n').count() + 1;
                return Err(Unencodable { character, line, encoding });
            }
        }
    }
}

/// A reader that yields the UTF-8 form of another reader's text in `encoding` (the byte-order
/// mark left out, bad sequences replaced by `U+FFFD`), for reading a window of a file in any
/// encoding line by line.
pub struct DecodingReader<R> {
    inner: R,
    decoder: encoding_rs::Decoder,
    input: Vec<u8>,
    output: Vec<u8>,
    /// How much of `output` was handed out.
    taken: usize,
    finished: bool,
    /// Some sequence could not be decoded.
    pub had_errors: bool,
}

impl<R: Read> DecodingReader<R> {
    /// Decode `inner`, which is written in `encoding`.
    pub fn new(inner: R, encoding: TextEncoding) -> Self {
        DecodingReader {
            inner,
            decoder: encoding.encoding.new_decoder_with_bom_removal(),
            input: vec![0; 16 * 1024],
            output: Vec::new(),
            taken: 0,
            finished: false,
            had_errors: false,
        }
    }
}

impl<R: Read> Read for DecodingReader<R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        while self.taken == self.output.len() {
            if self.finished {
                return Ok(0);
            }
            let read = self.inner.read(&mut self.input)?;
            let last = read == 0;
            let room = self.decoder.max_utf8_buffer_length(read).unwrap_or(read * 3 + 16);
            self.output.resize(room, 0);
            let (_, _, written, had_errors) = self.decoder.decode_to_utf8(&self.input[..read], &mut self.output, last);
            self.output.truncate(written);
            self.taken = 0;
            self.had_errors |= had_errors;
            self.finished = last;
        }
        let count = buffer.len().min(self.output.len() - self.taken);
        buffer[..count].copy_from_slice(&self.output[self.taken..self.taken + count]);
        self.taken += count;
        Ok(count)
    }
}

/// How a text's lines end.
pub fn line_endings(text: &str) -> &'static str {
    let newlines = text.matches('\n').count();
    let crlf = text.matches("\r\n").count();
    match (newlines, crlf) {
        (0, _) => "none",
        (all, crlf) if all == crlf => "crlf",
        (_, 0) => "lf",
        _ => "mixed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16le(text: &str, bom: bool) -> Vec<u8> {
        let mut bytes = if bom { vec![0xFF, 0xFE] } else { vec![] };
        bytes.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
        bytes
    }

    fn utf16be(text: &str, bom: bool) -> Vec<u8> {
        let mut bytes = if bom { vec![0xFE, 0xFF] } else { vec![] };
        bytes.extend(text.encode_utf16().flat_map(u16::to_be_bytes));
        bytes
    }

    /// A case of [`detection`]: its name, the bytes, and the encoding and BOM expected
    /// (`None`: binary).
    type DetectionCase = (&'static str, Vec<u8>, Option<(&'static str, bool)>);

    #[test]
    fn detection() {
        let latin1 = b"Gr\xfc\xdfe aus K\xf6ln: caf\xe9, cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade.\n".to_vec();
        let cases: Vec<DetectionCase> = vec![
            ("ascii", b"plain text\n".to_vec(), Some(("utf-8", false))),
            ("empty", Vec::new(), Some(("utf-8", false))),
            ("utf-8", "héllo wörld\n".as_bytes().to_vec(), Some(("utf-8", false))),
            ("utf-8 bom", b"\xEF\xBB\xBFhi\n".to_vec(), Some(("utf-8", true))),
            ("utf-16le bom", utf16le("héllo\r\nwörld\r\n", true), Some(("utf-16le", true))),
            ("utf-16be bom", utf16be("héllo\nwörld\n", true), Some(("utf-16be", true))),
            ("utf-16le bare", utf16le("hello world, plain text\n", false), Some(("utf-16le", false))),
            ("utf-16be bare", utf16be("hello world, plain text\n", false), Some(("utf-16be", false))),
            ("utf-16 emoji", utf16le("a😀b\n", true), Some(("utf-16le", true))),
            ("latin-1", latin1.clone(), Some(("windows-1252", false))),
            ("short latin-1", b"caf\xe9 au lait\nplain needle\n".to_vec(), Some(("windows-1252", false))),
            ("shortest latin-1", b"caf\xe9\n".to_vec(), Some(("windows-1252", false))),
            ("mostly utf-8", b"caf\xc3\xa9 cr\xc3\xa8me \xff\n".to_vec(), Some(("utf-8", false))),
            ("nul", b"ab\x00cd".to_vec(), None),
            ("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec(), None),
            ("utf-32le", b"\xFF\xFE\x00\x00a\x00\x00\x00".to_vec(), None),
            ("nul pairs", b"a\x00\x00\x00b\x00c\x00".to_vec(), None),
        ];
        for (name, bytes, expected) in cases {
            let got = detect(&bytes, true).map(|encoding| (encoding.name(), encoding.bom));
            assert_eq!(got, expected.map(|(encoding, bom)| (encoding.to_owned(), bom)), "{name}");
        }
        // A head cut inside a character is still UTF-8.
        let text = "é".repeat(10);
        assert_eq!(detect(&text.as_bytes()[..5], false), Some(TextEncoding::UTF_8));
        assert_eq!(detect(&latin1[..20], false).map(|encoding| encoding.is_utf8()), Some(false));
    }

    #[test]
    fn round_trips() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("utf-8", "héllo\r\n".as_bytes().to_vec()),
            ("utf-8 bom", b"\xEF\xBB\xBFh\xc3\xa9\n".to_vec()),
            ("utf-16le bom", utf16le("héllo 😀\r\n", true)),
            ("utf-16be bom", utf16be("héllo\n", true)),
            ("utf-16le bare", utf16le("hello world\n", false)),
            ("windows-1252", b"caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade \x80 \x81\n".to_vec()),
        ];
        for (name, bytes) in cases {
            let encoding = detect(&bytes, true).expect(name);
            let text = decode_exact(&bytes, encoding).expect(name);
            assert!(!text.starts_with('\u{feff}'), "{name}: the byte-order mark is left out");
            assert_eq!(encode(&text, encoding).expect(name), bytes, "{name}");
            let mut decoded = String::new();
            DecodingReader::new(std::io::Cursor::new(&bytes), encoding).read_to_string(&mut decoded).expect(name);
            assert_eq!(decoded, text, "{name}: the streaming decoder agrees");
        }
        let latin1 = TextEncoding { encoding: encoding_rs::WINDOWS_1252, bom: false };
        assert_eq!(decode_exact(b"caf\xe9", latin1).as_deref(), Some("café"));
        assert_eq!(decode_exact(b"caf\xc3", TextEncoding::UTF_8), None, "bad UTF-8 is not exact");
        assert_eq!(decode_lossy(b"a\xffb", TextEncoding::UTF_8), ("a\u{fffd}b".to_owned(), true));
    }

    #[test]
    fn unencodable_characters_are_named() {
        let latin1 = TextEncoding { encoding: encoding_rs::WINDOWS_1252, bom: false };
        assert_eq!(encode("café €5", latin1).expect("in windows-1252"), b"caf\xe9 \x805");
        let error = encode("a\nb\nsnow ☃ man", latin1).expect_err("no snowman in windows-1252");
        assert_eq!((error.character, error.line), ('☃', 3));
        // Past the encoder's buffer.
        let long = format!("{}\n☃", "é".repeat(40_000));
        assert_eq!(encode(&long, latin1).expect_err("no snowman").line, 2);
        assert_eq!(encode(&"é".repeat(40_000), latin1).expect("all Latin-1").len(), 40_000);
    }

    #[test]
    fn labels() {
        for (label, expected) in
            [("utf-8", "utf-8"), ("latin1", "windows-1252"), ("UTF-16LE", "utf-16le"), ("utf-16be", "utf-16be"), ("shift_jis", "shift_jis")]
        {
            assert_eq!(TextEncoding::from_label(label).map(|encoding| encoding.name()).ok().as_deref(), Some(expected), "{label}");
        }
        assert!(TextEncoding::from_label("utf-16le").is_ok_and(|encoding| encoding.bom));
        assert!(TextEncoding::from_label("klingon").is_err());
        assert!(TextEncoding::from_label("iso-2022-kr").is_err(), "the replacement encoding");
    }

    #[test]
    fn line_ending_kinds() {
        for (text, expected) in [("", "none"), ("a", "none"), ("a\nb\n", "lf"), ("a\r\nb\r\n", "crlf"), ("a\r\nb\n", "mixed")] {
            assert_eq!(line_endings(text), expected, "{text:?}");
        }
    }
}
