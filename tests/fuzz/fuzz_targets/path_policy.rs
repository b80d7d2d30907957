//! Path canonicalisation and policy evaluation against a reference model.
//!
//! The input builds a base directory, a path an agent might send, and a role's rules over a
//! small alphabet (so that matches are frequent). The model is written the simple way:
//! component lists for paths, a recursive matcher for globs (`*`, `?` within a component,
//! `**` for any number of components), the strongest matching effect (deny > ask > allow),
//! default deny, and protected paths that only a rule naming them explicitly can open for
//! modification. `join_lexically` and `Policy::decide` must agree with it on every input.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use toolcell_policy::{Access, Effect, Policy};

#[derive(Arbitrary, Debug)]
struct Input {
    base: Vec<u8>,
    path: Vec<u8>,
    rules: Vec<RawRule>,
    protected: Vec<u8>,
    access: u8,
}

#[derive(Arbitrary, Debug)]
struct RawRule {
    access: u8,
    patterns: Vec<Vec<u8>>,
    effect: u8,
}

/// Path components the fuzzer combines.
const COMPONENTS: &[&str] = &["a", "b", "ab", ".", "..", "", ".git", ".env", "a.rs", "b.md"];
/// Glob components the fuzzer combines.
const GLOB_COMPONENTS: &[&str] = &["a", "b", "*", "**", "?", "a*", "*.rs", "?b", ".git", ".env", "a?", "*b*"];

fn build(bytes: &[u8], alphabet: &[&str], max: usize) -> String {
    bytes.iter().take(max).map(|byte| alphabet[usize::from(*byte) % alphabet.len()]).collect::<Vec<_>>().join("/")
}

const ACCESSES: [Access; 4] = [Access::Read, Access::List, Access::Write, Access::Delete];
const EFFECTS: [(&str, Effect); 3] = [("allow", Effect::Allow), ("ask", Effect::Ask), ("deny", Effect::Deny)];

/// The model of `join_lexically`.
fn model_join(base: &str, path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut stack: Vec<String> = base.split('/').filter(|part| !part.is_empty() && *part != ".").map(str::to_owned).collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                stack.pop()?;
            }
            name => stack.push(name.to_owned()),
        }
    }
    Some(if stack.is_empty() { ".".to_owned() } else { stack.join("/") })
}

/// One glob component against one path component: `*` any run, `?` one character.
fn component_matches(glob: &[char], name: &[char]) -> bool {
    match (glob.first(), name.first()) {
        (None, None) => true,
        (Some('*'), _) => component_matches(&glob[1..], name) || (!name.is_empty() && component_matches(glob, &name[1..])),
        (Some('?'), Some(_)) => component_matches(&glob[1..], &name[1..]),
        (Some(expected), Some(actual)) if expected == actual => component_matches(&glob[1..], &name[1..]),
        _ => false,
    }
}

/// A glob against a canonical path, component by component; `**` takes any number of them.
fn glob_matches(glob: &[&str], path: &[&str]) -> bool {
    match glob.first() {
        None => path.is_empty(),
        Some(&"**") => glob_matches(&glob[1..], path) || (!path.is_empty() && glob_matches(glob, &path[1..])),
        Some(first) => {
            !path.is_empty() && {
                let glob_chars: Vec<char> = first.chars().collect();
                let name_chars: Vec<char> = path[0].chars().collect();
                component_matches(&glob_chars, &name_chars) && glob_matches(&glob[1..], &path[1..])
            }
        }
    }
}

fn model_match(pattern: &str, path: &str) -> bool {
    let glob: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = if path == "." { Vec::new() } else { path.split('/').collect() };
    glob_matches(&glob, &path)
}

/// The characters before the first glob metacharacter.
fn literal_prefix(pattern: &str) -> &str {
    let end = pattern.find(['*', '?', '[', '{', '\\']).unwrap_or(pattern.len());
    &pattern[..end]
}

/// Whether the rule pattern `pattern` names the protected pattern `guarded` explicitly.
fn model_names(pattern: &str, guarded: &str) -> bool {
    let prefix = literal_prefix(guarded);
    let root = prefix.trim_end_matches('/');
    if !root.is_empty() {
        // The rule's literal part starts inside the protected pattern's (`.git/hooks/**` for
        // `.git/**`), or the rule is its root itself.
        return literal_prefix(pattern).starts_with(prefix) || pattern == root;
    }
    // No literal root (`**/.env`): the same pattern, a literal path it matches, or a pattern
    // ending in the same last component, unless that component is wildcards alone.
    if pattern == guarded {
        return true;
    }
    if literal_prefix(pattern) == pattern {
        return model_match(guarded, pattern);
    }
    let last = |pattern: &str| pattern.rsplit('/').next().unwrap_or(pattern).to_owned();
    let named = last(guarded);
    named.chars().any(|character| !matches!(character, '*' | '?')) && last(pattern) == named
}

/// The model of `Policy::decide`.
fn model_decide(rules: &[(Vec<Access>, Vec<String>, Effect)], protected: &[String], access: Access, path: &str) -> Effect {
    let guarding: Option<&String> =
        if matches!(access, Access::Write | Access::Delete) { protected.iter().find(|pattern| model_match(pattern, path)) } else { None };
    let rank = |effect: Effect| match effect {
        Effect::Allow => 0,
        Effect::Ask => 1,
        Effect::Deny => 2,
    };
    let mut strongest: Option<Effect> = None;
    for (accesses, patterns, effect) in rules {
        if !accesses.contains(&access) {
            continue;
        }
        let applies =
            patterns.iter().any(|pattern| model_match(pattern, path) && guarding.is_none_or(|guarded| model_names(pattern, guarded)));
        if applies && strongest.is_none_or(|current| rank(*effect) > rank(current)) {
            strongest = Some(*effect);
        }
    }
    strongest.unwrap_or(Effect::Deny)
}

fuzz_target!(|input: Input| {
    let base = build(&input.base, &["a", "b", "ab"], 4);
    let base = if base.is_empty() { ".".to_owned() } else { base };
    let path = build(&input.path, COMPONENTS, 12);
    let joined = toolcell_policy::join_lexically(&base, &path);
    assert_eq!(joined, model_join(&base, &path), "join_lexically({base:?}, {path:?})");
    let Some(canonical) = joined else {
        return;
    };
    if canonical == "." {
        return;
    }

    // A policy with one role built from the rules.
    let mut toml = String::from("version = 1\n");
    let protected = build(&input.protected, GLOB_COMPONENTS, 3);
    let mut protected_patterns = vec![".git/**".to_owned()];
    if !protected.is_empty() {
        toml.push_str(&format!("protected = [{:?}]\n", protected));
        protected_patterns.push(protected);
    }
    toml.push_str("[roles.r]\ntools = [\"*\"]\n");
    let mut model_rules = Vec::new();
    for (index, rule) in input.rules.iter().take(6).enumerate() {
        let accesses: Vec<Access> =
            ACCESSES.iter().enumerate().filter(|(bit, _)| rule.access & (1 << bit) != 0).map(|(_, access)| *access).collect();
        let patterns: Vec<String> =
            rule.patterns.iter().take(3).map(|bytes| build(bytes, GLOB_COMPONENTS, 4)).filter(|pattern| !pattern.is_empty()).collect();
        if accesses.is_empty() || patterns.is_empty() {
            continue;
        }
        let (effect_name, effect) = EFFECTS[usize::from(rule.effect) % EFFECTS.len()];
        let access_names: Vec<&str> = accesses.iter().map(|access| access.as_str()).collect();
        toml.push_str(&format!(
            "[[roles.r.rules]]\nid = \"r{index}\"\naccess = {access_names:?}\npaths = {patterns:?}\neffect = \"{effect_name}\"\n"
        ));
        model_rules.push((accesses, patterns, effect));
    }
    // Patterns the glob library refuses (`a**`, say) make the policy invalid: that must be an
    // error, never a panic, and there is nothing to compare.
    let Ok(policy) = Policy::parse("fuzz.toml", &toml, &["read_file"]) else {
        return;
    };
    let Some(role) = policy.role("r") else {
        panic!("the role `r` is missing from a policy that parsed:\n{toml}");
    };
    let access = ACCESSES[usize::from(input.access) % ACCESSES.len()];
    let decided = policy.decide(role, access, &canonical).effect;
    let expected = model_decide(&model_rules, &protected_patterns, access, &canonical);
    assert_eq!(decided, expected, "{access:?} of {canonical:?} under\n{toml}");
});
