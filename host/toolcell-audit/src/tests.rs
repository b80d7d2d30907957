//! The chain's unit tests: sealing, verifying, and every kind of tampering found.
use super::*;

#[test]
fn hashes_are_lowercase_hex_sha256() {
    assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    assert_eq!(hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(hex(&[]), "");
    let every: Vec<u8> = (0..=255).collect();
    assert_eq!(unhex(&hex(&every)), Some(every));
}

/// A record sealed from its prepared form is the record as JSON, with its `seq` and `prev`
/// set, and the hash of that text after it: whatever its fields hold.
#[test]
fn a_prepared_record_seals_to_the_record_itself() {
    let mut full = Record::call("2026-11-22T00:00:00.000Z", "s\"1", "impl", "read_file", "c-1", "ok").at("/w \u{202e}x", Some("p"));
    full.notes = vec!["a\nb".to_owned(), "prev\":\"x".to_owned()];
    full.message = Some(",\"prev\":\"fake\"}".to_owned());
    full.prev = "stale".to_owned();
    full.seq = 99;
    let records = [full, Record::recovery("t", "s", "c", 2, None), Record::spawn("t", "p", "r", "tool", "c", "ch", "cr", "task")];
    let mut link = Link::GENESIS;
    for record in &records {
        let (line, next) = Prepared::new(record).seal(&link);
        let mut expected = record.clone();
        expected.seq = link.seq + 1;
        expected.prev = link.prev_hash().to_owned();
        let body = serde_json::to_string(&expected).expect("json");
        assert_eq!(line, format!("{},\"hash\":\"{}\"}}", &body[..body.len() - 1], hex(&Sha256::digest(body.as_bytes()))));
        assert_eq!(Link::of_line(&line), Ok(next.clone()));
        link = next;
    }
}

fn log(count: usize) -> Vec<String> {
    let mut link = Link::GENESIS;
    (0..count)
        .map(|index| {
            let record = Record::filesystem(
                "2026-11-22T00:00:00.000Z",
                "s",
                "impl",
                "write_file",
                &format!("c-{index}"),
                "open-at",
                &format!("src/{index}.rs"),
                "write",
                "allow",
                "impl-write",
            );
            let (line, next) = seal(&record, &link);
            link = next;
            line
        })
        .collect()
}

fn check(lines: &[String]) -> Result<Verified, Tamper> {
    verify(lines.iter().map(String::as_str))
}

#[test]
fn a_clean_log_verifies() {
    let lines = log(5);
    let verified = check(&lines).expect("clean");
    assert_eq!(verified.records, 5);
    assert_eq!(verified.last_hash, Link::of_line(&lines[4]).expect("sealed").hash);
    assert_eq!(check(&[]).expect("empty").records, 0);
}

#[test]
fn tampering_is_reported_by_line() {
    let lines = log(5);
    let table: Vec<(&str, Vec<String>, u64, &str)> = vec![
        (
            "edited",
            {
                let mut l = lines.clone();
                l[2] = l[2].replace("src/2.rs", "src/X.rs");
                l
            },
            3,
            "edited",
        ),
        (
            "deleted",
            {
                let mut l = lines.clone();
                l.remove(1);
                l
            },
            2,
            "removed",
        ),
        (
            "swapped",
            {
                let mut l = lines.clone();
                l.swap(1, 3);
                l
            },
            2,
            "seq is 4",
        ),
        (
            "last edited",
            {
                let mut l = lines.clone();
                l[4] = l[4].replace("allow", "deny!");
                l
            },
            5,
            "edited",
        ),
        (
            "garbage",
            {
                let mut l = lines.clone();
                l.insert(2, "hello".to_owned());
                l
            },
            3,
            "not a sealed",
        ),
        (
            "duplicated",
            {
                let mut l = lines.clone();
                l.insert(2, l[1].clone());
                l
            },
            3,
            "seq is 2",
        ),
    ];
    for (name, tampered, line, reason) in table {
        let error = check(&tampered).expect_err(name);
        assert_eq!(error.line, line, "{name}: {error}");
        assert!(error.reason.contains(reason), "{name}: {error}");
    }
}

#[test]
fn rehashing_an_edit_still_breaks_the_next_link() {
    let mut lines = log(3);
    let mut record: Record = serde_json::from_str(&split_hash(&lines[1]).expect("sealed").0).expect("record");
    record.path = Some("src/forged.rs".to_owned());
    let previous = Link::of_line(&lines[0]).expect("sealed");
    lines[1] = seal(&record, &previous).0;
    let error = check(&lines).expect_err("the forged record changes the chain");
    assert_eq!(error.line, 3);
    assert!(error.reason.contains("prev"), "{error}");
}

#[test]
fn display_escapes_control_characters() {
    let record = Record::filesystem("t", "s", "impl", "tool", "c", "open-at", "café\nFAKE LINE", "write", "deny", "r");
    let shown = display(&record);
    assert!(!shown.contains('\n'));
    assert!(shown.contains("café\\nFAKE LINE"), "{shown}");
}

#[test]
fn the_head_catches_records_cut_off_the_end() {
    let lines = log(5);
    let head = Link::of_line(&lines[4]).expect("a record");
    let all: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(verify_with_head(all.iter().copied(), &head).map(|verified| verified.records), Ok(5));
    // A head one behind the log (a crash between the two writes) is accepted.
    let behind = Link::of_line(&lines[3]).expect("a record");
    assert!(verify_with_head(all.iter().copied(), &behind).is_ok());
    // The last records removed: every line that is left verifies, but the head is not reached.
    let cut = verify_with_head(all[..3].iter().copied(), &head).expect_err("truncated");
    assert!(cut.reason.contains("last records were removed") && cut.line == 4, "{cut}");
    assert!(verify_with_head(std::iter::empty(), &head).is_err());
    // The chain rebuilt from a point on: the head's hash is not there any more.
    let forged = Link { seq: 5, hash: "0".repeat(64) };
    assert!(verify_with_head(all.iter().copied(), &forged).is_err());
}
