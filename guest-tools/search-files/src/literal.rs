//! The literal every match of a query holds, found in a file as ripgrep finds it
//! (`grep-regex`'s inner literals): `memmem` over the whole buffer for the literal, then the
//! query on the one line around each place it is found.
//!
//! The regex crate's own prefilter looks only at how a match starts: for
//! `^    [a-z]+ = [a-z]+\(value, let\);$` that is four spaces, on nearly every line, and the
//! automaton then runs over the whole file. The literal inside (`(value, let);`) is rare:
//! looking for it first leaves the automaton a line now and then.

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind};

/// Shorter literals are found too often to save work over the regex's own search.
const SHORTEST: usize = 3;

/// The longest literal that every match of `query` holds, if one of at least [`SHORTEST`]
/// bytes is known: one part of the query's top-level sequence that always starts with it.
pub(crate) fn required(query: &str, case_insensitive: bool) -> Option<memchr::memmem::Finder<'static>> {
    let hir = regex_syntax::ParserBuilder::new().utf8(false).case_insensitive(case_insensitive).build().parse(query).ok()?;
    let mut best: Option<Vec<u8>> = None;
    let mut consider = |part: &Hir| {
        let seq = Extractor::new().kind(ExtractKind::Prefix).extract(part);
        // One literal only: a match of this part starts with it (a set, as case-insensitive
        // letters give, is left to the regex).
        let Some([literal]) = seq.literals() else {
            return;
        };
        let bytes = literal.as_bytes();
        if bytes.len() >= SHORTEST && best.as_ref().is_none_or(|best| bytes.len() > best.len()) {
            best = Some(bytes.to_vec());
        }
    };
    let mut top = &hir;
    while let HirKind::Capture(capture) = top.kind() {
        top = &capture.sub;
    }
    match top.kind() {
        HirKind::Concat(parts) => parts.iter().for_each(&mut consider),
        _ => consider(top),
    }
    // A line never holds a newline: such a literal would only ever be looked for in vain.
    best.filter(|literal| !literal.contains(&b'\n')).map(|literal| memchr::memmem::Finder::new(&literal).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(query: &str, case_insensitive: bool) -> Option<String> {
        required(query, case_insensitive).map(|finder| String::from_utf8_lossy(finder.needle()).into_owned())
    }

    #[test]
    fn the_longest_required_literal_is_found() {
        let table: [(&str, bool, Option<&str>); 10] = [
            (r"^    [a-z]+ = [a-z]+\(value, let\);$", false, Some("(value, let);")),
            ("zebra_quartz_needle", false, Some("zebra_quartz_needle")),
            (r"fn needle_handler_\d+", false, Some("fn needle_handler_")),
            ("gamma.*delta", false, Some("gamma")),
            ("(gamma).*delta_x", false, Some("delta_x")),
            // No literal every match holds, or one too short.
            ("foo|bar", false, None),
            ("ab", false, None),
            (r"[a-z]{3}_\d{6}", false, None),
            // Case-insensitive letters are a set: the regex keeps them.
            ("quartzheron", true, None),
            ("(?s)a\nbcd", false, None),
        ];
        for (query, case_insensitive, expected) in table {
            assert_eq!(literal(query, case_insensitive).as_deref(), expected, "{query:?}");
        }
    }
}
