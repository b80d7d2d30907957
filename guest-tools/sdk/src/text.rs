//! Text helpers shared by the file tools: binary detection, numbered lines, clipping.

/// How many leading bytes [`is_binary`] inspects.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Whether content looks binary: a NUL byte in its first [`BINARY_SNIFF_BYTES`] bytes (the
/// rule git and ripgrep use).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// A line in `cat -n` style: the 1-based number right-aligned in six columns, a tab, the text.
pub fn numbered(number: usize, line: &str) -> String {
    format!("{number:>6}\t{line}")
}

/// `line` cut to at most `max_chars` characters, with a marker saying how much was cut.
pub fn clip(line: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
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
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 3), "abc… [line truncated: 3 more characters]");
        assert_eq!(clip("ééééé", 2), "éé… [line truncated: 3 more characters]");
    }

    #[test]
    fn numbering() {
        assert_eq!(numbered(7, "x"), "     7\tx");
        assert_eq!(numbered(1234567, "x"), "1234567\tx");
    }
}
