//! From a regular expression to the [`Query`] its matches need: substrings every match must
//! contain, as trigrams (after the method of Russ Cox's codesearch, simplified).
//!
//! Each node of the expression gets its *exact set* (every string it can match, when that is
//! a small finite set) and a *query* every match satisfies. Runs of exact nodes in a
//! concatenation multiply their sets, so that trigrams spanning their boundaries count; an
//! alternation is the union of its branches' sets, or the OR of their queries; anything
//! unknown (`.`, `\w+`, an optional part) asks nothing. Strings are folded to ASCII lowercase,
//! as the index's trigrams are.

use std::collections::BTreeSet;

use regex_syntax::ParserBuilder;
use regex_syntax::hir::{Class, Hir, HirKind};

use crate::{Trigram, trigrams_of};

/// What a search needs from the index: the files holding a trigram, and combinations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// Every file (the pattern has no usable substring).
    All,
    /// The files holding this trigram.
    Trigram(Trigram),
    /// The files every part allows.
    And(Vec<Query>),
    /// The files any part allows.
    Or(Vec<Query>),
}

/// An exact set larger than this is given up (as a query of its strings).
const MAX_EXACT: usize = 64;
/// A character class of more characters than this is not expanded.
const MAX_CLASS: usize = 16;

/// The query every match of `pattern` satisfies (`(?i)` when `case_insensitive`).
///
/// # Errors
///
/// The parser's message for a pattern that is not a valid regular expression.
pub fn plan(pattern: &str, case_insensitive: bool) -> Result<Query, String> {
    let hir = ParserBuilder::new()
        .case_insensitive(case_insensitive)
        // As the search compiles it: bytes that are not UTF-8 may be asked for.
        .utf8(false)
        .build()
        .parse(pattern)
        .map_err(|error| error.to_string())?;
    Ok(info(&hir).into_query())
}

type Strings = BTreeSet<Vec<u8>>;

struct Info {
    /// Every string the node can match, if that is known and small.
    exact: Option<Strings>,
    /// What every match satisfies besides its exact set.
    query: Query,
}

impl Info {
    fn exact(strings: Strings) -> Info {
        Info { exact: Some(strings), query: Query::All }
    }

    fn unknown(query: Query) -> Info {
        Info { exact: None, query }
    }

    fn into_query(self) -> Query {
        let from_exact = self.exact.map_or(Query::All, |strings| query_of(&strings));
        and(vec![self.query, from_exact])
    }
}

fn folded(bytes: &[u8]) -> Vec<u8> {
    bytes.to_ascii_lowercase()
}

fn info(hir: &Hir) -> Info {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Info::exact(BTreeSet::from([Vec::new()])),
        HirKind::Literal(literal) => Info::exact(BTreeSet::from([folded(&literal.0)])),
        HirKind::Class(class) => class_strings(class).map_or_else(|| Info::unknown(Query::All), Info::exact),
        HirKind::Capture(capture) => info(&capture.sub),
        HirKind::Repetition(repetition) => {
            let sub = info(&repetition.sub);
            match (repetition.min, repetition.max) {
                (1, Some(1)) => sub,
                // Optional: the empty string, or the part.
                (0, Some(1)) => match sub.exact {
                    Some(mut strings) if strings.len() < MAX_EXACT => {
                        strings.insert(Vec::new());
                        Info::exact(strings)
                    }
                    _ => Info::unknown(Query::All),
                },
                (0, _) => Info::unknown(Query::All),
                // At least once: whatever one occurrence needs.
                _ => Info::unknown(sub.into_query()),
            }
        }
        HirKind::Concat(parts) => concat(parts),
        HirKind::Alternation(branches) => {
            let infos: Vec<Info> = branches.iter().map(info).collect();
            if infos.iter().all(|info| info.exact.is_some() && info.query == Query::All) {
                let union: Strings = infos.iter().flat_map(|info| info.exact.iter().flatten().cloned()).collect();
                if union.len() <= MAX_EXACT {
                    return Info::exact(union);
                }
            }
            Info::unknown(or(infos.into_iter().map(Info::into_query).collect()))
        }
    }
}

/// A concatenation: runs of exact parts multiplied out, everything else ANDed.
fn concat(parts: &[Hir]) -> Info {
    let mut queries = Vec::new();
    let mut run: Strings = BTreeSet::from([Vec::new()]);
    let mut whole_is_exact = true;
    for part in parts {
        let part = info(part);
        queries.push(part.query);
        match part.exact {
            Some(strings) if run.len() * strings.len() <= MAX_EXACT => {
                run = run.iter().flat_map(|left| strings.iter().map(move |right| [left.as_slice(), right.as_slice()].concat())).collect();
            }
            Some(strings) => {
                // Too many combinations: the run so far is required, and a new one starts.
                queries.push(query_of(&run));
                run = strings;
                whole_is_exact = false;
            }
            None => {
                queries.push(query_of(&run));
                run = BTreeSet::from([Vec::new()]);
                whole_is_exact = false;
            }
        }
    }
    if whole_is_exact {
        return Info { exact: Some(run), query: and(queries) };
    }
    queries.push(query_of(&run));
    Info::unknown(and(queries))
}

/// The strings of a small class (each character's UTF-8, or each byte), folded.
fn class_strings(class: &Class) -> Option<Strings> {
    let mut strings = Strings::new();
    match class {
        Class::Unicode(class) => {
            for range in class.iter() {
                let count = (range.end() as u32).saturating_sub(range.start() as u32) as usize + 1;
                if strings.len() + count > MAX_CLASS {
                    return None;
                }
                for character in range.start()..=range.end() {
                    strings.insert(folded(character.encode_utf8(&mut [0; 4]).as_bytes()));
                }
            }
        }
        Class::Bytes(class) => {
            for range in class.iter() {
                let count = usize::from(range.end() - range.start()) + 1;
                if strings.len() + count > MAX_CLASS {
                    return None;
                }
                for byte in range.start()..=range.end() {
                    strings.insert(folded(&[byte]));
                }
            }
        }
    }
    Some(strings)
}

/// Any of `strings`: the OR of each one's trigrams ANDed; a string too short for a trigram
/// allows every file.
fn query_of(strings: &Strings) -> Query {
    if strings.is_empty() {
        return Query::All;
    }
    or(strings
        .iter()
        .map(|string| {
            let trigrams = trigrams_of(string);
            and(trigrams.into_iter().map(Query::Trigram).collect())
        })
        .collect())
}

/// `parts` ANDed, without `All`s and nested `And`s.
fn and(parts: Vec<Query>) -> Query {
    let mut flat = Vec::new();
    for part in parts {
        match part {
            Query::All => {}
            Query::And(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    flat.dedup();
    match flat.len() {
        0 => Query::All,
        1 => flat.pop().unwrap_or(Query::All),
        _ => Query::And(flat),
    }
}

/// `parts` ORed; `All` if any part allows every file.
fn or(parts: Vec<Query>) -> Query {
    let mut flat = Vec::new();
    for part in parts {
        match part {
            Query::All => return Query::All,
            Query::Or(inner) => flat.extend(inner),
            other => flat.push(other),
        }
    }
    flat.dedup();
    match flat.len() {
        0 => Query::All,
        1 => flat.pop().unwrap_or(Query::All),
        _ => Query::Or(flat),
    }
}
