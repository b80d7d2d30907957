//! What a role may change by itself, the bound of what a lock it holds may keep others from
//! changing; and the one judgment of lock and rule patterns (is it a glob, may two meet).

use std::collections::HashMap;
use std::sync::Mutex;

use super::*;

/// The characters that make a pattern a glob; a pattern without any names one path.
const GLOB_CHARACTERS: [char; 5] = ['*', '?', '[', '{', '\\'];

/// Bound roles cached for [`Policy::may_change`], at most this many (then it starts again).
const MAX_CACHED: usize = 4096;

/// Roles bound by [`Policy::may_change`], by role, tool and task: a lock check runs for every
/// live lock whose pattern matches a changed path, and binding rebuilds the role's globs.
#[derive(Default)]
pub(crate) struct BoundCache(Mutex<HashMap<BoundKey, Option<Arc<Role>>>>);

/// A role, a tool (empty for none) and a task (`CHAIN/TASK`).
type BoundKey = (String, String, Option<String>);

impl Clone for BoundCache {
    fn clone(&self) -> Self {
        BoundCache::default()
    }
}

impl fmt::Debug for BoundCache {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("BoundCache")
    }
}

impl Policy {
    /// Whether `role`, bound to `task`, may itself make `access` (a write or a delete) to the
    /// canonical `path` without asking anybody. Only the rules that name no tool count, and a
    /// rule naming a tool only when it is about the task (`{chain}`, `{task}`) and the role may
    /// call the tool: a tool's narrow right (the task tools moving any chain's task files) is
    /// that tool's, not the role's. An `ask` rule, a protected path and the default deny take
    /// the access away. `false` for a role the policy does not know.
    ///
    /// A lock held for `role` keeps other sessions from `access` to `path` only if this says
    /// yes: a role may never block a change it could not make itself.
    pub fn may_change(&self, role: &str, access: Access, path: &str, task: Option<&TaskBinding>) -> bool {
        let Some(shared) = self.roles.get(role) else {
            return false;
        };
        let allows = |bound: Option<Arc<Role>>| bound.is_some_and(|bound| self.verdict(&bound, access, path).effect() == Effect::Allow);
        if allows(self.lock_view(role, "", task)) {
            return true;
        }
        task.is_some() && task_tools(shared).any(|tool| allows(self.lock_view(role, tool, task)))
    }

    /// `role` as a lock held for it judges a change, for a call of `tool` (empty: a tool no
    /// rule names) bound to `task`, cached: its rules naming no tool, bound to the task; of the
    /// rules naming `tool`, the paths that use the task, bound to it, and every `deny` and
    /// `ask` (they still take the change away). A rule naming `tool` and no task is the
    /// tool's own narrow right, left out.
    fn lock_view(&self, role: &str, tool: &str, task: Option<&TaskBinding>) -> Option<Arc<Role>> {
        let key = (role.to_owned(), tool.to_owned(), task.map(ToString::to_string));
        let mut cache = self.bound.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bound) = cache.get(&key) {
            return bound.clone();
        }
        let bound = self.roles.get(role).and_then(|shared| lock_view(shared, tool, task));
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(key, bound.clone());
        bound
    }

    /// What may keep a lock of `role` (bound to `task`) on the glob `pattern` from covering
    /// part of what it matches, worded for an agent: the rules that take `access` away
    /// (``rule `docs-read-only` (`docs/**`)``), the protected paths (``protected `**/.env` ``),
    /// and the default deny where no rule that counts ([`may_change`](Self::may_change))
    /// allows the whole pattern. Conservative: a rule is named when its paths may meet the
    /// pattern's. Empty for an unknown role.
    pub fn limits_within(&self, role: &str, access: Access, pattern: &str, task: Option<&TaskBinding>) -> Vec<String> {
        let Some(shared) = self.roles.get(role) else {
            return Vec::new();
        };
        let views: Vec<Arc<Role>> =
            std::iter::once("").chain(task_tools(shared)).filter_map(|tool| self.lock_view(role, tool, task)).collect();
        let counted = views.iter().flat_map(|view| view.rules.iter()).filter(|rule| rule.access.contains(&access));
        let mut limits = Vec::new();
        let (mut allowed_somewhere, mut allowed_everywhere) = (false, false);
        for rule in counted {
            for glob in &rule.patterns {
                if !may_overlap(glob, pattern) {
                    continue;
                }
                if rule.effect == Effect::Allow {
                    allowed_somewhere = true;
                    allowed_everywhere |= rule.tools.is_none() && contains_all(glob, pattern);
                } else {
                    let named = format!("rule `{}` (`{}`)", rule.id, glob.escape_default());
                    if !limits.contains(&named) {
                        limits.push(named);
                    }
                }
            }
        }
        if !allowed_somewhere {
            limits.push("the default deny (no rule lets the role change any of it, so the lock covers nothing)".to_owned());
        } else if !allowed_everywhere {
            limits.push("the default deny (where no rule lets the role change it)".to_owned());
        }
        if access.is_modification() {
            let built_in = BUILT_IN_PROTECTED.iter().copied();
            for protected in self.protected.iter().map(|protected| protected.pattern.as_str()).chain(built_in) {
                let named = format!("protected `{}`", protected.escape_default());
                if may_overlap(protected, pattern) && !limits.contains(&named) {
                    limits.push(named);
                }
            }
        }
        limits
    }
}

/// [`Policy::lock_view`], uncached.
fn lock_view(shared: &Arc<Role>, tool: &str, task: Option<&TaskBinding>) -> Option<Arc<Role>> {
    let mut rules = shared.rules.clone();
    for rule in &shared.scoped {
        let names_tool = rule.tools.as_ref().map(|tools| tools.iter().any(|named| named == tool));
        let mut bound = rule.clone();
        bound.scoped = names_tool.is_some();
        match (names_tool, task) {
            (Some(false), _) => continue,
            (None, None) if rule.templated => continue,
            (None, _) if !rule.templated => {}
            (Some(true), _) if !rule.templated => {
                if rule.effect == Effect::Allow {
                    continue;
                }
            }
            (_, Some(task)) => {
                // Of a rule naming the tool, only its paths about the task.
                let keep = |pattern: &String| names_tool.is_none() || is_templated(pattern);
                bound.patterns = rule.patterns.iter().filter(|pattern| keep(pattern)).map(|pattern| substitute(pattern, task)).collect();
                // Bound, a templated path adds no metacharacter, so it compiles again.
                bound.globs = bound.patterns.iter().filter_map(|pattern| compile_glob(pattern).ok()).collect();
                if bound.globs.is_empty() {
                    continue;
                }
            }
            (_, None) => continue,
        }
        rules.push(bound);
    }
    if rules.len() == shared.rules.len() {
        return Some(Arc::clone(shared));
    }
    bind::with_rules(shared, rules)
}

/// The tools named by a rule of `role` about its task, which the role may call.
fn task_tools(role: &Role) -> impl Iterator<Item = &str> {
    let mut tools: Vec<&str> =
        role.scoped.iter().filter(|rule| rule.templated).filter_map(|rule| rule.tools.as_deref()).flatten().map(String::as_str).collect();
    tools.sort_unstable();
    tools.dedup();
    tools.into_iter().filter(|tool| role.may_call(tool))
}

/// Whether the glob `glob` surely matches every path `pattern` matches: `pattern` is a path it
/// matches, or `glob` is `**` or a literal directory's `/**` holding `pattern`'s literal part.
fn contains_all(glob: &str, pattern: &str) -> bool {
    if !is_glob(pattern) {
        return compile_glob(glob).is_ok_and(|glob| glob.is_match(pattern));
    }
    if glob == "**" {
        return true;
    }
    glob.strip_suffix("/**")
        .is_some_and(|directory| !is_glob(directory) && literal_directory(pattern).starts_with(&format!("{directory}/")))
}

/// Whether a path or lock pattern is a glob (`*`, `?`, `[`, `{` or an escape `\`), rather
/// than the one canonical path it names. Every host judgment of a lock pattern uses this.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(GLOB_CHARACTERS)
}

/// Whether two globs (or paths) over canonical workspace-relative paths may match a common
/// path. `.`, the workspace itself, meets everything. Exact when either is a literal path;
/// conservative (it may say yes when they cannot meet) for two globs, judged by their literal
/// directory prefixes (`docs/` for `docs/*.md`). `{chain}` and `{task}` count as wildcards.
pub fn may_overlap(a: &str, b: &str) -> bool {
    if a == b || a == "." || b == "." {
        return true;
    }
    let glob_matches = |glob: &str, path: &str| compile_glob(glob).is_ok_and(|glob| glob.is_match(path));
    match (is_glob(a), is_glob(b)) {
        (false, false) => false,
        (false, true) => glob_matches(b, a),
        (true, false) => glob_matches(a, b),
        (true, true) => {
            let (a, b) = (literal_directory(a), literal_directory(b));
            a.starts_with(b) || b.starts_with(a)
        }
    }
}

/// The directory part of a glob before its first wildcard: `src/` for `src/*.rs`, empty for
/// `*.env`.
fn literal_directory(pattern: &str) -> &str {
    let literal = &pattern[..pattern.find(GLOB_CHARACTERS).unwrap_or(pattern.len())];
    &literal[..literal.rfind('/').map_or(0, |slash| slash + 1)]
}
