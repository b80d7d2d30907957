//! The runtime's typed errors: what went wrong in the host, as opposed to a tool's own
//! [`ToolError`](toolcell_types::ToolError), which the agent sees.

use std::path::PathBuf;

/// A failure of the host itself: loading components, opening the workspace, or running a
/// call's machinery. Messages may name host paths (they are for the operator, never a guest).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasmtime engine could not be configured.
    #[error("cannot set up the WebAssembly engine: {reason}")]
    Engine {
        /// wasmtime's explanation.
        reason: String,
    },

    /// A component could not be compiled, instantiated or described.
    #[error("cannot load the tool component `{origin}`: {reason}")]
    Load {
        /// Where the component came from (`builtin:read_file`, a file path).
        origin: String,
        /// What failed.
        reason: String,
    },

    /// A component imports an interface outside the `tool-component` world.
    #[error(
        "the tool component `{origin}` imports `{import}`, which toolcell does not provide: a tool may import only \
         `toolcell:tool/{{context, workflow, listing}}` and the WASI interfaces of the `tool-component` world in wit/tool.wit \
         (filesystem, io, clocks, random, cli); rebuild it without that dependency, or, if the tool never calls it, let the \
         policy link it as a stub that refuses every call: `[plugins.TOOL] stub_imports = [\"namespace:package/*\"]`"
    )]
    ForbiddenImport {
        /// Where the component came from.
        origin: String,
        /// The refused import, as the component names it.
        import: String,
    },

    /// A component built against another version of the `toolcell:tool` contract.
    #[error(
        "the tool component `{origin}` was built against another version of the toolcell contract (it imports `{import}`); \
         this host speaks `toolcell:tool@0.2.x`, whose `tool-info` declares an `output-schema`: rebuild the component \
         against the wit/ of this toolcell version"
    )]
    Contract {
        /// Where the component came from.
        origin: String,
        /// Its `toolcell:tool` import.
        import: String,
    },

    /// Two components describe themselves with the same tool name.
    #[error(
        "two tool components are named `{name}`: `{first}` and `{second}`; to replace an installed plugin with another build \
         of it, use `toolcell tools update {name} FILE`; to drop an installed one, `toolcell tools remove {name}`"
    )]
    DuplicateTool {
        /// The shared name.
        name: String,
        /// The component loaded first.
        first: String,
        /// The component refused.
        second: String,
    },

    /// A plugin the policy needs (a role lists it, or the policy configures it) cannot be
    /// loaded. A plugin the policy does not need is skipped instead, with a warning.
    #[error("the plugin `{tool}` (`{origin}`) cannot be loaded, and the policy needs it ({why}): {reason}; {fix}")]
    NeededPlugin {
        /// The tool's name (its file's name when it did not get as far as describing itself).
        tool: String,
        /// Where the component came from.
        origin: String,
        /// Where the policy names it.
        why: String,
        /// What failed.
        reason: String,
        /// What to do.
        fix: String,
    },

    /// A component's `describe()` is not acceptable.
    #[error("the tool component `{origin}` describes itself badly: {reason}")]
    InvalidDescription {
        /// Where the component came from.
        origin: String,
        /// What is wrong (name syntax, schema).
        reason: String,
    },

    /// A call named a tool that is not loaded.
    #[error("there is no tool named `{name}`; the tools are: {available}")]
    UnknownTool {
        /// The requested name (control characters escaped).
        name: String,
        /// The loaded tools' names, comma-separated.
        available: String,
    },

    /// A session cannot be opened as asked (an unknown or ended spawned session, a task
    /// binding that disagrees with the session's record).
    #[error("cannot open the session `{session}`: {reason}")]
    Session {
        /// The session id (control characters escaped).
        session: String,
        /// Why, and what to do.
        reason: String,
    },

    /// A call named a role the policy does not define.
    #[error("the policy has no role `{role}`; its roles are: {roles}")]
    UnknownRole {
        /// The requested role (control characters escaped).
        role: String,
        /// The policy's roles, comma-separated.
        roles: String,
    },

    /// The policy file cannot be read.
    #[error("cannot read the policy `{}`: {source}", path.display())]
    PolicyFile {
        /// The file given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// Outbound HTTP cannot be set up from the policy's `[network]` table (a `roots` bundle
    /// that cannot be read or is not PEM certificates).
    #[error("cannot set up outbound HTTP: {reason}")]
    Network {
        /// What is wrong, naming the value at fault.
        reason: String,
    },

    /// The policy cannot be loaded.
    #[error("cannot load the policy: {0}")]
    Policy(#[from] toolcell_policy::PolicyError),

    /// The workspace directory cannot be used.
    #[error("cannot use `{}` as the workspace: {reason}", path.display())]
    Workspace {
        /// The directory given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },

    /// The compiled-component cache directory cannot be used.
    #[error("cannot use the compiled-component cache at `{}`: {source}", path.display())]
    Cache {
        /// The cache directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A host-owned location (the compiled-component cache, its key, the plugin directory)
    /// could be changed by someone other than the user running toolcell, or overlaps a
    /// workspace in a way that would let a tool change it.
    #[error("refusing to use `{}`: {reason}", path.display())]
    Insecure {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong, and how to fix it.
        reason: String,
    },

    /// What toolcell keeps for a workspace (the state directory, its journals, undo records,
    /// read versions, audit trail, index) cannot be used.
    #[error(transparent)]
    State(toolcell_state::Error),

    /// Settings given to the builder that do not go together: a mistake in how the host is
    /// configured, reported before anything is opened.
    #[error("{problem}; {hint}")]
    Configuration {
        /// What does not go together.
        problem: String,
        /// What to do.
        hint: String,
    },

    /// A component's bytes differ from the SHA-256 the policy pins for its tool.
    #[error("{0}")]
    PinMismatch(Box<PinMismatch>),

    /// The plugin directory cannot be read.
    #[error("cannot read the plugin directory `{}`: {source}", path.display())]
    Plugins {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The lock table cannot be used, or refused a request.
    #[error(transparent)]
    Lock(#[from] toolcell_state::LockStoreError),

    /// The host failed while running a call (not the tool: instantiation or a host bug).
    #[error("the host failed to run `{tool}`: {reason}")]
    Call {
        /// The tool being called.
        tool: String,
        /// What failed.
        reason: String,
    },
}

/// A component whose bytes differ from its pin.
#[derive(Debug, thiserror::Error)]
#[error(
    "the component `{origin}` providing `{tool}` has SHA-256 {actual}, but {policy} line {line} pins {expected}: the plugin changed since it was pinned; install the reviewed build with `toolcell tools update {tool} FILE` (it updates the pin too), or review this one and update the pin"
)]
pub struct PinMismatch {
    /// The tool.
    pub tool: String,
    /// Where the component came from.
    pub origin: String,
    /// The pinned hash.
    pub expected: String,
    /// The component's hash.
    pub actual: String,
    /// The policy file.
    pub policy: String,
    /// The pin's line.
    pub line: usize,
}

impl From<toolcell_state::Error> for Error {
    fn from(error: toolcell_state::Error) -> Self {
        match error {
            // A host-owned location others could change is the runtime's own refusal too (the
            // cache, the plugin directory): one variant for all of them.
            toolcell_state::Error::Insecure { path, reason } => Error::Insecure { path, reason },
            error => Error::State(error),
        }
    }
}
