//! How rules are matched: compiled globs with their literal prefixes, and per role and access an
//! index that matches a path once instead of once per glob.

use super::*;

/// The globs of one role's rules about one access, arranged so that a decision matches a path
/// once, not once per glob.
#[derive(Debug, Clone)]
pub(crate) struct AccessIndex {
    /// The matchers without a literal prefix (`**/*.pem`), in one [`globset::GlobSet`].
    pub(crate) set: globset::GlobSet,
    /// The `(rule, glob)` each pattern of `set` belongs to.
    pub(crate) owners: Vec<(usize, usize)>,
    /// The matchers with a literal prefix (`docs/**`, `.env.*`), each tried only on paths
    /// that start with it.
    pub(crate) prefixed: Vec<(PrefixedMatcher, (usize, usize))>,
    /// The `(rule, glob)` of every `**` glob: they match any path, so nothing is matched.
    pub(crate) everywhere: Vec<(usize, usize)>,
}

impl AccessIndex {
    pub(crate) fn new(rules: &[Rule], access: Access) -> Result<AccessIndex, String> {
        let mut builder = globset::GlobSetBuilder::new();
        let mut owners = Vec::new();
        let mut prefixed = Vec::new();
        let mut everywhere = Vec::new();
        for (rule_index, rule) in rules.iter().enumerate().filter(|(_, rule)| rule.access.contains(&access)) {
            for (glob_index, glob) in rule.globs.iter().enumerate() {
                if glob.matches_everything {
                    everywhere.push((rule_index, glob_index));
                    continue;
                }
                for matcher in std::iter::once(&glob.matcher).chain(glob.directory.as_ref()) {
                    if matcher.prefix.is_empty() {
                        builder.add(matcher.matcher.glob().clone());
                        owners.push((rule_index, glob_index));
                    } else {
                        prefixed.push((matcher.clone(), (rule_index, glob_index)));
                    }
                }
            }
        }
        let set = builder.build().map_err(|error| format!("the rules' globs cannot be combined: {}", error.kind()))?;
        Ok(AccessIndex { set, owners, prefixed, everywhere })
    }

    /// Every `(rule, glob)` whose glob matches `path`, in no particular order.
    pub(crate) fn matching<'a>(&'a self, path: &'a str, matched: &'a mut Vec<usize>) -> impl Iterator<Item = &'a (usize, usize)> + 'a {
        matched.clear();
        if !self.set.is_empty() {
            self.set.matches_candidate_into(&globset::Candidate::new(path), matched);
        }
        let prefixed = self.prefixed.iter().filter(move |(matcher, _)| matcher.is_match(path)).map(|(_, owner)| owner);
        matched.iter().map(|&pattern| &self.owners[pattern]).chain(prefixed).chain(&self.everywhere)
    }
}

/// A glob's matcher behind the part of the glob before its first metacharacter: every path
/// the glob matches starts with that prefix, so most paths are settled by a compare.
#[derive(Debug, Clone)]
pub(crate) struct PrefixedMatcher {
    pub(crate) prefix: String,
    pub(crate) matcher: globset::GlobMatcher,
}

impl PrefixedMatcher {
    pub(crate) fn new(matcher: globset::GlobMatcher) -> PrefixedMatcher {
        let pattern = matcher.glob().glob();
        let end = pattern.find(['*', '?', '[', '{', '\\']).unwrap_or(pattern.len());
        PrefixedMatcher { prefix: pattern[..end].to_owned(), matcher }
    }

    pub(crate) fn is_match(&self, path: &str) -> bool {
        path.starts_with(self.prefix.as_str()) && self.matcher.is_match(path)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum ToolSet {
    All,
    Only(Vec<String>),
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) id: String,
    pub(crate) line: usize,
    pub(crate) access: Vec<Access>,
    pub(crate) globs: Vec<PathGlob>,
    pub(crate) effect: Effect,
    /// The tools the rule is about; `None` for every tool.
    pub(crate) tools: Option<Vec<String>>,
    /// Whether a path uses `{chain}` or `{task}`.
    pub(crate) templated: bool,
    /// The paths as written, for binding a templated rule.
    pub(crate) patterns: Vec<String>,
    /// In a role bound for a call: the rule names the calling tool, so it outranks the rules
    /// that name none.
    pub(crate) scoped: bool,
}

/// A compiled glob over canonical workspace-relative paths, with the policy's semantics: `*`
/// stays within one path component, `**` crosses them, and `X/**` also matches `X` itself.
/// Policies, lock patterns and validators all match paths with it.
#[derive(Debug, Clone)]
pub struct PathGlob {
    pub(crate) matcher: PrefixedMatcher,
    /// For `X/**`, a matcher of `X` itself (globset's `X/**` does not match the directory).
    pub(crate) directory: Option<PrefixedMatcher>,
    /// The pattern has no metacharacter: it names one path.
    pub(crate) literal: bool,
    /// The pattern is `**`: it matches every path.
    pub(crate) matches_everything: bool,
}

impl PathGlob {
    /// Compile `pattern`.
    ///
    /// # Errors
    ///
    /// Why the pattern is not a valid glob, or can never match a canonical path (a leading
    /// `/`, a `.` or `..` component).
    pub fn new(pattern: &str) -> Result<PathGlob, String> {
        compile_glob(pattern)
    }

    /// Whether the canonical workspace-relative `path` matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.matches_everything || self.matcher.is_match(path) || self.directory.as_ref().is_some_and(|directory| directory.is_match(path))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Protected {
    pub(crate) pattern: String,
    pub(crate) glob: PathGlob,
}

/// Paths protected in every policy.
pub(crate) const BUILT_IN_PROTECTED: &[&str] = &[".git/**"];

pub(crate) fn compile_glob(pattern: &str) -> Result<PathGlob, String> {
    let quoted = format!("`{}`", pattern.escape_default());
    if pattern.is_empty() {
        return Err("an empty glob matches nothing: use `**` for every path".to_owned());
    }
    if pattern.starts_with('/') || pattern.split('/').any(|part| part == ".." || part == ".") {
        return Err(format!(
            "glob {quoted} can never match: rules match canonical workspace-relative paths such as `src/main.rs`, without a leading `/`, `.` or `..`"
        ));
    }
    let build = |pattern: &str| {
        globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|glob| PrefixedMatcher::new(glob.compile_matcher()))
            .map_err(|glob_error| format!("glob {quoted} is not valid: {}", glob_error.kind()))
    };
    let matcher = build(pattern)?;
    // `X/**` (and `X/**/**`, ...) also covers `X` itself.
    let mut prefix = pattern;
    while let Some(shorter) = prefix.strip_suffix("/**") {
        prefix = shorter;
    }
    let directory = if prefix != pattern && !prefix.is_empty() && prefix != "**" { Some(build(prefix)?) } else { None };
    let literal = matcher.prefix.len() == pattern.len();
    Ok(PathGlob { matcher, directory, literal, matches_everything: pattern == "**" })
}

/// `base/path` normalised lexically (`.` and empty components dropped, `..` applied) as a
/// workspace-relative path, `.` for the root; `None` if it is absolute or climbs above the root.
/// `base` is itself such a path. Symlinks are not resolved: the host does that against the real
/// workspace before asking [`Policy::decide`].
pub fn join_lexically(base: &str, path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = if base == "." { Vec::new() } else { base.split('/').collect() };
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(if parts.is_empty() { ".".to_owned() } else { parts.join("/") })
}
