//! Declaring the hosts a tool wants: [`declare_hosts!`](crate::declare_hosts) puts them in
//! the component's `toolcell:network` custom section, one `SCHEME://HOST[:PORT]` per line,
//! where the host reads them without running the component. The declaration grants nothing:
//! the operator's policy decides every request. `toolcell tools add` shows each declared
//! host beside what the policy says about it, with the policy lines that would grant it, and
//! `toolcell conformance` checks the declaration is well formed.

/// The name of the custom section.
pub const SECTION: &str = "toolcell:network";

/// `text` as the `N` bytes of a static (`N` is its length).
#[doc(hidden)]
pub const fn section_bytes<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(bytes.len() == N, "the section's length is its text's");
    let mut section = [0u8; N];
    let mut index = 0;
    while index < N {
        section[index] = bytes[index];
        index += 1;
    }
    section
}

/// Whether every line of `text` starts with `http://` or `https://` and holds no space, no
/// `/` after the scheme, no `?`, `#` or `@` (the host checks the rest when it reads it).
#[doc(hidden)]
pub const fn is_declaration(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = start;
        while end < bytes.len() && bytes[end] != b'\n' {
            end += 1;
        }
        let rest = if starts_with(bytes, start, b"https://") {
            start + 8
        } else if starts_with(bytes, start, b"http://") {
            start + 7
        } else {
            return false;
        };
        if rest == end {
            return false;
        }
        let mut index = rest;
        while index < end {
            if matches!(bytes[index], b' ' | b'\t' | b'/' | b'?' | b'#' | b'@') {
                return false;
            }
            index += 1;
        }
        start = end + 1;
    }
    true
}

const fn starts_with(bytes: &[u8], start: usize, prefix: &[u8]) -> bool {
    if bytes.len() - start < prefix.len() {
        return false;
    }
    let mut index = 0;
    while index < prefix.len() {
        if bytes[start + index] != prefix[index] {
            return false;
        }
        index += 1;
    }
    true
}

/// Declare the hosts the tool wants to reach, as `SCHEME://HOST[:PORT]` literals (`HOST` may
/// be `*.domain`): they go into the component's `toolcell:network` custom section. Use it
/// once, beside [`export_tool!`](crate::export_tool). A literal that is not such a
/// destination fails the build.
///
/// ```
/// toolcell_sdk::declare_hosts!("https://docs.rs", "https://*.wikipedia.org", "http://intranet.example:8080");
/// ```
///
/// ```compile_fail
/// toolcell_sdk::declare_hosts!("docs.rs/path");
/// ```
#[macro_export]
macro_rules! declare_hosts {
    ($($host:literal),+ $(,)?) => {
        const _: () = {
            const TEXT: &str = ::core::concat!($($host, "\n"),+);
            const _: () = ::core::assert!(
                $crate::declare::is_declaration(TEXT),
                "declare_hosts! takes `SCHEME://HOST[:PORT]` literals, such as \"https://api.example.com\""
            );
            // Kept by the linker (`used`), and copied into the component with its core module.
            #[used]
            #[unsafe(link_section = "toolcell:network")]
            static DECLARATION: [u8; TEXT.len()] = $crate::declare::section_bytes::<{ TEXT.len() }>(TEXT);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_destinations_pass_the_build_time_check() {
        for (text, expected) in [
            ("https://docs.rs\n", true),
            ("https://docs.rs\nhttp://a.test:8080\nhttps://*.wikipedia.org\n", true),
            ("docs.rs\n", false),
            ("https://\n", false),
            ("https://docs.rs/path\n", false),
            ("https://user@docs.rs\n", false),
            ("https://docs.rs extra\n", false),
            ("ftp://docs.rs\n", false),
        ] {
            assert_eq!(is_declaration(text), expected, "{text:?}");
        }
        assert_eq!(section_bytes::<4>("ab\nc"), *b"ab\nc");
    }
}
