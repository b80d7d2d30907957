//! What a rollback leaves as it finds because of what another session (of this host or
//! another, or another program) did meanwhile, and how the caller is told.

use toolcell_state::journal::Replayed;

/// The moves (`from`, `to`) of `moves` whose source is among `left` (another session made it
/// again meanwhile) and whose destination is not: the file cannot be moved back, so it stays
/// where the call moved it (removing it would lose the only copy of its content).
pub(super) fn kept_moves(moves: &[(String, String)], left: &[String]) -> Vec<(String, String)> {
    moves.iter().filter(|(from, to)| left.contains(from) && !left.contains(to)).cloned().collect()
}

/// The sentence added to a rolled-back call's error: that nothing was changed, or what was
/// left and why.
pub(super) fn note(replaced: &[String], kept: &[(String, String)], replayed: &Replayed) -> String {
    if replaced.is_empty()
        && kept.is_empty()
        && replayed.left.is_empty()
        && replayed.remade.is_empty()
        && replayed.unrestored.is_empty()
        && replayed.times_unrestored.is_empty()
    {
        return "\n(No file was changed: every change this call made was rolled back.)".to_owned();
    }
    let mut parts = Vec::new();
    if !replaced.is_empty() {
        parts.push(format!(
            "Changed by another session after this call changed them, and left as that session made them: {}; read them again.",
            listed(replaced.iter())
        ));
    }
    if !kept.is_empty() {
        parts.push(format!(
            "Left where this call moved them, because another session made their source again meanwhile: {}.",
            kept.iter().map(|(from, to)| format!("`{}` (from `{}`)", shown(to), shown(from))).collect::<Vec<_>>().join(", ")
        ));
    }
    if !replayed.left.is_empty() {
        parts.push(format!(
            "Directories this call made, left in place because they hold what another session made (or a file named above): {}.",
            listed(replayed.left.iter())
        ));
    }
    if !replayed.remade.is_empty() {
        parts.push(format!(
            "Directories made again to put back what this call changed, because another session moved or removed them meanwhile: {}.",
            listed(replayed.remade.iter())
        ));
    }
    if !replayed.unrestored.is_empty() {
        parts.push(format!(
            "Not put back, because another session put a file or symlink where a directory on their way was (left as it is), so this call's removal or move of them stands: {}.",
            listed(replayed.unrestored.iter())
        ));
    }
    if !replayed.times_unrestored.is_empty() {
        parts.push(format!(
            "Times set by this call and not set back, because the files belong to another user (only the owner may set a given time): {}.",
            listed(replayed.times_unrestored.iter())
        ));
    }
    format!("\n(Every other change this call made was rolled back. {})", parts.join(" "))
}

fn shown(path: &str) -> String {
    toolcell_types::escape_control(path)
}

/// `paths`, each once, in the order first met (a directory a rollback passes twice is named
/// once).
fn listed<'a>(paths: impl Iterator<Item = &'a String>) -> String {
    let mut named: Vec<&String> = Vec::new();
    for path in paths {
        if !named.contains(&path) {
            named.push(path);
        }
    }
    named.into_iter().map(|path| format!("`{}`", shown(path))).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_whose_source_was_made_again_keeps_its_destination() {
        let moves = vec![("a".to_owned(), "b".to_owned()), ("c".to_owned(), "d".to_owned())];
        assert_eq!(kept_moves(&moves, &["a".to_owned()]), vec![("a".to_owned(), "b".to_owned())]);
        assert!(kept_moves(&moves, &["a".to_owned(), "b".to_owned()]).is_empty());
        assert!(kept_moves(&moves, &["b".to_owned()]).is_empty());
    }

    #[test]
    fn the_note_says_what_was_left_and_why() {
        assert!(note(&[], &[], &Replayed::default()).contains("No file was changed"));
        let replayed = Replayed {
            left: vec!["t/d".to_owned(), "t".to_owned(), "t/d".to_owned()],
            remade: vec!["e".to_owned()],
            unrestored: vec!["x/f".to_owned()],
            times_unrestored: vec!["y".to_owned()],
        };
        let said = note(&["a".to_owned()], &[("a".to_owned(), "b".to_owned())], &replayed);
        assert!(said.contains("left as that session made them: `a`"), "{said}");
        assert!(said.contains("`b` (from `a`)"), "{said}");
        assert!(said.contains("named above): `t/d`, `t`."), "each directory once: {said}");
        assert!(said.contains("moved or removed them meanwhile: `e`"), "{said}");
        assert!(said.contains("removal or move of them stands: `x/f`."), "{said}");
        assert!(said.contains("only the owner may set a given time): `y`."), "{said}");
        assert!(!said.contains("No file was changed"), "{said}");
    }
}
