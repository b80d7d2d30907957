use super::*;

fn index_of(files: &[(&str, &str)]) -> Index {
    let mut builder = IndexBuilder::new();
    for (path, content) in files {
        builder.add(path, content.as_bytes());
    }
    builder.build()
}

fn candidates(index: &Index, pattern: &str, case_insensitive: bool) -> Vec<String> {
    let query = plan(pattern, case_insensitive).expect("a valid pattern");
    index.candidates(&query).into_iter().map(|id| index.path(id).to_owned()).collect()
}

#[test]
fn queries_ask_for_what_every_match_contains() {
    let table: [(&str, bool, Query); 8] = [
        ("abc", false, Query::Trigram(trigram(b"abc"))),
        ("ab", false, Query::All),
        (".*", false, Query::All),
        ("ABC", true, Query::Trigram(trigram(b"abc"))),
        ("abcd", false, Query::And(vec![Query::Trigram(trigram(b"abc")), Query::Trigram(trigram(b"bcd"))])),
        ("abc|xyz", false, Query::Or(vec![Query::Trigram(trigram(b"abc")), Query::Trigram(trigram(b"xyz"))])),
        ("abc|x", false, Query::All),
        (r"\w+abc", false, Query::Trigram(trigram(b"abc"))),
    ];
    for (pattern, case_insensitive, expected) in table {
        assert_eq!(plan(pattern, case_insensitive), Ok(expected), "{pattern}");
    }
    // An optional part multiplies out: colou?r is `color` or `colour`, each all its trigrams.
    let all_of = |word: &[u8]| Query::And(trigrams_of(word).into_iter().map(Query::Trigram).collect());
    assert_eq!(plan("colou?r", false), Ok(Query::Or(vec![all_of(b"color"), all_of(b"colour")])));
    assert!(plan("(", false).is_err());
}

#[test]
fn candidates_are_the_files_holding_the_substrings() {
    let index = index_of(&[("a.rs", "fn main() { hello(); }"), ("b.rs", "fn other() {}"), ("c.md", "HELLO world")]);
    assert_eq!(candidates(&index, "hello", false), ["a.rs", "c.md"], "trigrams are case-folded: a superset");
    assert_eq!(candidates(&index, "fn (main|other)", false), ["a.rs", "b.rs"]);
    assert_eq!(candidates(&index, "world|other", false), ["b.rs", "c.md"]);
    assert_eq!(candidates(&index, "zebra", false), Vec::<String>::new());
    assert_eq!(candidates(&index, "x?", false), ["a.rs", "b.rs", "c.md"]);
}

/// A small deterministic random source (xorshift).
struct Random(u64);

impl Random {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }
}

/// A random regular expression over a small alphabet.
fn pattern(random: &mut Random, depth: usize) -> String {
    let atoms = ["a", "b", "c", "ab", "abc", "bca", "A", "Bc", "x", "é", "É", ".", r"\n", "[ab]", "[a-c]", r"\w", " ", r"\s"];
    if depth == 0 {
        return random.pick(&atoms).to_owned();
    }
    match random.below(6) {
        0 => format!("{}{}", pattern(random, depth - 1), pattern(random, depth - 1)),
        1 => format!("(?:{}|{})", pattern(random, depth - 1), pattern(random, depth - 1)),
        2 => format!("(?:{}){}", pattern(random, depth - 1), random.pick(&["?", "*", "+", "{2}", "{1,3}"])),
        3 => format!("{}{}{}", pattern(random, depth - 1), random.pick(&atoms), pattern(random, depth - 1)),
        _ => random.pick(&atoms).to_owned(),
    }
}

#[test]
fn a_file_that_matches_is_always_a_candidate() {
    let mut random = Random(0x9E37_79B9_7F4A_7C15);
    let alphabet = ["a", "b", "c", "A", "B", "C", "x", " ", "\n", "é", "É", "\r\n"];
    for round in 0..300 {
        let files: Vec<String> = (0..12).map(|_| (0..random.below(40)).map(|_| random.pick(&alphabet)).collect::<String>()).collect();
        let mut builder = IndexBuilder::new();
        for (number, content) in files.iter().enumerate() {
            builder.add(&number.to_string(), content.as_bytes());
        }
        let index = builder.build();
        for _ in 0..20 {
            let depth = random.below(4);
            let text = pattern(&mut random, depth);
            for case_insensitive in [false, true] {
                for multiline in [false, true] {
                    let regex = regex::bytes::RegexBuilder::new(&text)
                        .case_insensitive(case_insensitive)
                        .multi_line(multiline)
                        .dot_matches_new_line(multiline)
                        .build()
                        .expect("a valid pattern");
                    let query = plan(&text, case_insensitive).expect("a valid pattern");
                    let found = index.candidates(&query);
                    // A file outside the index is judged by its own trigrams exactly as the
                    // index judges the files it holds.
                    for (number, content) in files.iter().enumerate() {
                        assert_eq!(
                            query.may_match(&trigrams_of(content.as_bytes())),
                            found.contains(&(number as u32)),
                            "round {round}: {text:?} on {content:?}: may_match and candidates disagree"
                        );
                    }
                    for (number, content) in files.iter().enumerate() {
                        if regex.is_match(content.as_bytes()) {
                            assert!(
                                found.contains(&(number as u32)),
                                "round {round}: {text:?} (case-insensitive {case_insensitive}) matches {content:?} but the query {query:?} left it out"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_index_survives_its_bytes_and_damage_is_refused() {
    let mut builder = IndexBuilder::new();
    for number in 0..50 {
        let content = format!("file {number}: fn item_{number}() {{ shared_text(); }}\n");
        builder.add_stamped(
            &format!("src/m{number}.rs"),
            content.as_bytes(),
            Stamp { size: content.len() as u64, changed_ns: number, inode: 1000 + number },
        );
    }
    let index = builder.build();
    let bytes = index.to_bytes();
    assert_eq!(Index::from_bytes(&bytes), Ok(index.clone()));
    // Cut anywhere, or any byte changed: refused, never half-read.
    for cut in 0..bytes.len() {
        assert!(Index::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for at in (0..bytes.len()).step_by(7) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x41;
        assert!(Index::from_bytes(&damaged).is_err(), "byte {at} changed");
    }
    // Content that is inconsistent, with a checksum made to match: still refused.
    use sha2::Digest as _;
    let forge = |body: &[u8]| [body, sha2::Sha256::digest(body).as_slice()].concat();
    let body = &bytes[..bytes.len() - 32];
    let mut extra = body.to_vec();
    extra.push(0);
    assert!(matches!(Index::from_bytes(&forge(&extra)), Err(DecodeError::Inconsistent(_))));
    let huge_count = [&body[..16], &[0xFF, 0xFF, 0xFF, 0xFF, 0x0F][..]].concat();
    assert!(matches!(Index::from_bytes(&forge(&huge_count)), Err(DecodeError::Inconsistent(_))));
    assert_eq!(Index::from_bytes(b"not an index at all, not at all, not at all"), Err(DecodeError::Format));
}

/// The postings of each file's distinct trigrams, as the definition says: every id in order
/// under every trigram its text holds (past the point where the builder moves common trigrams
/// to its table, with bytes in and out of it).
#[test]
fn the_builder_indexes_every_trigram_of_every_file() {
    let mut random = Random(0x0DDB_1A5E_5BAD_5EED);
    let alphabet: [&[u8]; 10] = [b"a", b"B", b"\n", b"\t", b" ", b"~", b"\x00", b"\xc3\xa9", b"\xff", b"Z"];
    let mut builder = IndexBuilder::new();
    let mut expected: std::collections::BTreeMap<Trigram, Vec<u32>> = std::collections::BTreeMap::new();
    for id in 0..(DENSE_FROM_FILES as u32 * 2) {
        let content: Vec<u8> = (0..random.below(40)).flat_map(|_| alphabet[random.below(alphabet.len())].iter().copied()).collect();
        for trigram in trigrams_of(&content) {
            expected.entry(trigram).or_default().push(id);
        }
        builder.add(&format!("f{id}"), &content);
    }
    let index = builder.build();
    let postings = |index: &Index| -> std::collections::BTreeMap<Trigram, Vec<u32>> {
        index.keys.iter().map(|trigram| (*trigram, index.posting(*trigram))).collect()
    };
    assert_eq!(postings(&index), expected);
    assert!(index.keys.windows(2).all(|pair| pair[0] < pair[1]), "keys sorted");
    // Read back from its bytes (lists of ids over a byte long, found eight bytes at a time),
    // each list decodes to the same ids.
    let read = Index::from_bytes(&index.to_bytes()).expect("the index reads back");
    assert_eq!(postings(&read), expected);
}

/// A list whose ids name no file or repeat one, in a file whose checksum was made to match, is
/// read as every file: more candidates, never fewer.
#[test]
fn a_forged_posting_list_reads_as_every_file() {
    let index = index_of(&[("a.rs", "abcd"), ("b.rs", "abce"), ("c.rs", "xyz")]);
    let bytes = index.to_bytes();
    let body = &bytes[..bytes.len() - 32];
    // The last list is `xyz`'s: one id, 2. Make it 9 (no such file).
    assert_eq!(body[body.len() - 1], 2);
    let mut forged = body.to_vec();
    *forged.last_mut().expect("a byte") = 9;
    use sha2::Digest as _;
    let forged = [forged.as_slice(), sha2::Sha256::digest(&forged).as_slice()].concat();
    let read = Index::from_bytes(&forged).expect("the structure is sound");
    assert_eq!(candidates(&read, "xyz", false), ["a.rs", "b.rs", "c.rs"]);
    assert_eq!(candidates(&read, "abc", false), ["a.rs", "b.rs"]);
}

#[test]
fn a_files_trigrams_hold_no_memory_beyond_the_distinct_ones() {
    // A megabyte of one repeated word: a trigram per byte collected, three distinct kept.
    let text = "abc".repeat(1 << 20);
    let trigrams = trigrams_of(text.as_bytes());
    assert_eq!(trigrams.len(), 3);
    assert!(trigrams.capacity() < 64, "{} kept", trigrams.capacity());
}
