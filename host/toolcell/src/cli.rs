//! Every command-line flag, in one place.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Run file tools for LLM agents as sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "toolcell", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// How the host loads its components.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// Where compiled components are cached [default: $TOOLCELL_CACHE_DIR, else
    /// $XDG_CACHE_HOME/toolcell, else ~/.cache/toolcell].
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Compile every component at start instead of using the cache.
    #[arg(long, global = true, conflicts_with = "cache_dir")]
    pub no_cache: bool,

    /// Report on stderr how each component was loaded (compiled, or from the cache).
    #[arg(long, short, global = true)]
    pub verbose: bool,

    /// The governance policy: a TOML file, or a shipped one by name (`builtin:default`,
    /// `builtin:workflow`) [default: builtin:default].
    #[arg(long, global = true, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Where the audit trail is kept, outside the workspace [default: $TOOLCELL_STATE_DIR, else
    /// $XDG_STATE_HOME/toolcell, else ~/.local/state/toolcell].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Load every `*.wasm` tool component in this directory besides the built-in tools
    /// [default: `plugins` in the state directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,

    /// Keep locks and the audit trail in PostgreSQL, shared with other hosts
    /// (`postgres://USER@HOST/DB`, or `host=/socket/dir dbname=DB`) [default: the state
    /// directory].
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,

    /// Resolve NAME to ADDRESS for components' outbound HTTP requests, as curl's `--resolve`
    /// does (repeatable; other names go to the system's resolver). The address is still
    /// checked against the role's network rules.
    #[arg(long, global = true, value_name = "NAME=ADDRESS")]
    pub resolve: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the tools with their descriptions and argument schemas, or add a plugin.
    Tools {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,

        #[command(subcommand)]
        command: Option<ToolsCommand>,
    },

    /// Call one tool and print its result.
    ///
    /// Exit status: 0 on success, 1 if the tool returned an error (printed on stderr), 2 if the
    /// host could not run the call.
    Call(CallArgs),

    /// Serve the tools of one role over MCP on stdin/stdout (logs go to stderr).
    Mcp(McpArgs),

    /// Serve MCP over Streamable HTTP to many clients: each bearer token of the service
    /// configuration stands for a principal with its workspace and role (logs go to stderr).
    Serve(ServeArgs),

    /// Print a new bearer token and the `token_sha256` line that admits it in a service
    /// configuration (with `--hash`, the line for a token read from stdin).
    Token {
        /// Hash a token read from stdin instead of making a new one.
        #[arg(long)]
        hash: bool,
    },

    /// Write the SDK of a language and the contract (`wit/`) into a directory, to write a tool
    /// in Python or JavaScript (guest-tools/README.md has the steps).
    Sdk {
        /// `python` or `javascript`.
        #[arg(value_parser = ["python", "javascript"])]
        language: String,

        /// The directory to write into (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },

    /// Print a shell completion script (`toolcell completions bash > /etc/bash_completion.d/toolcell`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },

    /// Print the tool definitions a role may call, in a model provider's shape.
    Schema {
        /// The role whose tools to print.
        #[arg(long, default_value = "impl")]
        role: String,

        /// `mcp` (a tools/list result), `anthropic` (Messages API tools) or `openai` (Chat
        /// Completions tools).
        #[arg(long, default_value = "mcp", value_parser = ["mcp", "anthropic", "openai"])]
        format: String,

        /// With `--format openai`: schemas for OpenAI's strict mode (every property required,
        /// optional ones nullable, no additional properties, only the keywords it accepts).
        #[arg(long)]
        strict: bool,
    },

    /// Check and explain governance policies.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// Verify or show the audit trail.
    #[command(subcommand)]
    Audit(AuditCommand),

    /// Acquire, release and list locks on a workspace's paths (kept in the state directory,
    /// shared by every toolcell process using it).
    #[command(subcommand)]
    Lock(LockCommand),

    /// Check a tool component against the conformance suite: the contract, the sandbox, and
    /// the behaviour of the standard tool it claims to be.
    ///
    /// Exit status: 0 if every check passes, 1 if one fails, 2 if the file cannot be read.
    Conformance {
        /// The component (`.wasm`).
        component: PathBuf,

        /// Print the report as JSON (the same as `--format json`).
        #[arg(long, conflicts_with = "format")]
        json: bool,

        /// How to print the report: `text`, `json`, or `junit` (JUnit XML, for CI systems).
        #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json", "junit"])]
        format: String,

        /// Let the component link these imports as stubs that refuse every call
        /// (`wasi:sockets/*`), as `[plugins.NAME] stub_imports` in a policy does.
        #[arg(long, value_name = "INTERFACE")]
        stub_imports: Vec<String>,
    },

    /// List the sessions the host knows of: spawned for tasks, with parent, role, task and
    /// state.
    #[command(subcommand)]
    Sessions(SessionsCommand),

    /// Build, check or drop a workspace's content index (kept in the state directory).
    #[command(subcommand)]
    Index(IndexCommand),

    /// The shared store (`--store`): bring its schema up to date, or say where it stands.
    #[command(subcommand)]
    Store(StoreCommand),

    /// Write a self-contained HTML report of a session (or a chain) for its reviewer: the
    /// timeline of its calls, the diff of every change, refusals with their rules, locks and
    /// child sessions.
    Report(ReportArgs),

    /// Create a demo workspace and run a short agent session through every tool.
    Demo {
        /// The workspace to use (created if missing) [default: a new directory under the system
        /// temporary directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool's name, for example `read_file`.
    pub tool: String,

    /// The arguments, a JSON object, for example '{"path": "README.md"}'; `-` reads them from
    /// stdin, `@FILE` from a file.
    #[arg(default_value = "{}")]
    pub args: String,

    /// The workspace directory the tool may touch.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// The role the caller acts as.
    #[arg(long, default_value = "impl")]
    pub role: String,

    /// The caller's session id.
    #[arg(long, default_value = "cli")]
    pub session: String,

    /// Print the whole outcome as JSON (text, structured result or error, call id).
    #[arg(long)]
    pub json: bool,

    /// Approve every access the policy marks `ask` (each approval is reported on stderr).
    #[arg(long)]
    pub approve: bool,

    /// Write as this lock owner (a chain or task id) [default: the task's chain, else the
    /// session id].
    #[arg(long)]
    pub owner: Option<String>,

    /// Bind the call to one task (`CHAIN-ID/NNN-slug`): the policy's `{chain}` / `{task}`
    /// rules and the task tools act on it.
    #[arg(long, value_name = "CHAIN/TASK")]
    pub task: Option<String>,

    /// Present the fencing token of a lock this caller holds (repeatable): a token whose lease
    /// lapsed refuses the writes it covers.
    #[arg(long = "fence", value_name = "TOKEN")]
    pub fences: Vec<u64>,
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Check a tool component (imports, description, schema, name collisions, the policy's
    /// pins, then the conformance suite) and install it in the plugin directory; prints its
    /// SHA-256 to pin. Adding the same bytes again changes nothing.
    ///
    /// Exit status: 0 installed (or already there), 1 refused by the conformance suite, 2 not
    /// loadable.
    ///
    /// From a registry (`oci://HOST[:PORT]/NAME:TAG` or `…@sha256:DIGEST`): a tag is resolved
    /// once, and the pin printed holds the manifest digest (`source`) beside the sha256.
    Add {
        /// The component (`.wasm`, built for wasm32-wasip2 against `wit/tool.wit`), or a
        /// registry reference `oci://…`.
        component: String,

        /// Install it even if conformance checks fail (they are printed as warnings).
        #[arg(long)]
        force: bool,

        /// Plain HTTP to a registry on this machine (`localhost`).
        #[arg(long)]
        insecure: bool,
    },

    /// Push a tool component to an OCI registry as `wkg oci push` does (one `application/wasm`
    /// layer, a `application/vnd.wasm.config.v0+json` config); prints the pinned reference.
    Push {
        /// The component (`.wasm`).
        component: PathBuf,

        /// Where to: `oci://HOST[:PORT]/NAME:TAG`.
        reference: String,

        /// `org.opencontainers.image.version`.
        #[arg(long)]
        version: Option<String>,

        /// `org.opencontainers.image.description`.
        #[arg(long)]
        description: Option<String>,

        /// `org.opencontainers.image.source` (the source repository's URL).
        #[arg(long)]
        source: Option<String>,

        /// Plain HTTP to a registry on this machine (`localhost`).
        #[arg(long)]
        insecure: bool,
    },

    /// Download a tool component from an OCI registry, checking every blob's digest, into the
    /// cache (and `--output`); prints its manifest digest and sha256.
    Pull {
        /// `oci://HOST[:PORT]/NAME:TAG` or `…@sha256:DIGEST`.
        reference: String,

        /// Write the component to this file too.
        #[arg(long, short)]
        output: Option<PathBuf>,

        /// Plain HTTP to a registry on this machine (`localhost`).
        #[arg(long)]
        insecure: bool,
    },

    /// Replace an installed plugin with another build of it, and its pin in the policy
    /// (`--policy`), in one step: shows what changes (SHA-256, annotations, imports, schemas),
    /// checks the new build as `add` does, then replaces the file and the pin; on any failure
    /// the old plugin and pin stay.
    ///
    /// Exit status: 0 replaced (or the same bytes), 1 refused by the conformance suite, 2 not
    /// loadable or not installed.
    Update {
        /// The installed plugin's tool name (`line_count`).
        name: String,

        /// The new build (`.wasm`); without it, a plugin added from a registry has its tag
        /// (the policy's `source`) resolved again.
        component: Option<PathBuf>,

        /// Install it even if conformance checks fail (they are printed as warnings).
        #[arg(long)]
        force: bool,

        /// Plain HTTP to a registry on this machine (`localhost`).
        #[arg(long)]
        insecure: bool,
    },

    /// Sign a tool component in an OCI registry as `cosign sign --key` does: a signature of
    /// its manifest digest (a tag is resolved first) under the tag `sha256-DIGEST.sig`. Policies
    /// check it with `[registry] signature_keys` (and `require_signatures`).
    Sign {
        /// `oci://HOST[:PORT]/NAME:TAG` or `…@sha256:DIGEST`.
        reference: String,

        /// The private key: a PEM `PRIVATE KEY` or `EC PRIVATE KEY` of an ECDSA P-256 key
        /// (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`).
        #[arg(long)]
        key: PathBuf,

        /// Plain HTTP to a registry on this machine (`localhost`).
        #[arg(long)]
        insecure: bool,
    },

    /// Remove an installed plugin by its tool name.
    Remove {
        /// The tool's name (`word_count`).
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Acquire (or renew) a lock and print its fencing token.
    ///
    /// Exit status: 0 if acquired, 1 if another owner holds a conflicting lock (named on stderr).
    Acquire {
        /// A workspace-relative path or glob (`src/a.rs`, `src/**`).
        pattern: String,

        /// The workspace.
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,

        /// Who holds it (a chain or task id).
        #[arg(long)]
        owner: String,

        /// The session acquiring it [default: the owner].
        #[arg(long)]
        session: Option<String>,

        /// `exclusive` or `shared`.
        #[arg(long, default_value = "exclusive", value_parser = ["exclusive", "shared"])]
        mode: String,

        /// How long the lease lasts: seconds (`90`) or with a unit (`90s`, `5m`, `1h`).
        #[arg(long, default_value = "5m", value_parser = parse_ttl)]
        ttl: std::time::Duration,

        /// Print the lock as JSON.
        #[arg(long)]
        json: bool,
    },

    /// Release a lock by its token.
    Release {
        /// The fencing token `acquire` printed.
        token: u64,

        /// The workspace.
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,

        /// The owner holding it.
        #[arg(long)]
        owner: String,
    },

    /// List the live locks of a workspace.
    List {
        /// The workspace.
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,

        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The workspace directory the tools may touch [default: the first root the client
    /// declares (MCP `roots`), followed when they change].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// The role the client acts as: it sees only this role's tools.
    #[arg(long, default_value = "impl")]
    pub role: String,

    /// The session id recorded in the audit trail [default: mcp-<process id>]. A session a
    /// tool spawned (`spawn_impl_session`) takes its role, task and owner from its record.
    #[arg(long)]
    pub session: Option<String>,

    /// Bind the session to one task (`CHAIN-ID/NNN-slug`); it then writes for the task's
    /// chain.
    #[arg(long, value_name = "CHAIN/TASK")]
    pub task: Option<String>,

    /// Approve every access the policy marks `ask` (each approval is reported on stderr).
    #[arg(long)]
    pub approve: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The service configuration (TOML): workspaces, principals and their token hashes.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,

    /// Where to listen [default: the configuration's `listen`, else 127.0.0.1:8750]. Port 0
    /// picks a free port; the address is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// How stderr is written: `text` lines, or `json` (one object per line, with `call_id`,
    /// `session`, `principal` on every call's line).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Apply the migrations the database lacks (once per deployment and upgrade, as the
    /// database's owner); hosts refuse to start on a database at another version.
    Migrate,
    /// The database's schema version, and this toolcell's.
    Status,
}

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Build the index of a workspace's text files, replacing any earlier one.
    Build(IndexArgs),
    /// Say whether a workspace has an index, whether it is intact, and how many files changed
    /// since it was built. Exit status 1 if it is absent or damaged.
    Status(IndexArgs),
    /// Remove a workspace's index.
    Drop(IndexArgs),
}

#[derive(Debug, Args)]
pub struct IndexArgs {
    /// The workspace [default: the current directory].
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the known sessions, oldest first.
    List {
        /// Only sessions of this workspace.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,

        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The workspace the session worked in.
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,

    /// The session to report on (its spawned child sessions are included).
    #[arg(long, required_unless_present = "chain", conflicts_with = "chain")]
    pub session: Option<String>,

    /// Report on every session bound to a task of this chain, and the sessions that spawned
    /// them.
    #[arg(long)]
    pub chain: Option<String>,

    /// Where to write the HTML file.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,

    /// The role of whoever reads the report: a change's content is shown only where this role
    /// may read the file. Without it, each change is shown as the role of the session that
    /// made it may read it.
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain; report the first edited, removed or reordered record by line.
    ///
    /// Exit status: 0 if the chain is intact, 1 if it is broken.
    Verify,

    /// Print the last records readably.
    Tail {
        /// How many records to print.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,

        /// Only records of this session.
        #[arg(long)]
        session: Option<String>,

        /// Keep printing records as they are appended (until interrupted).
        #[arg(long, short)]
        follow: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the effective policy (`--policy`, else the built-in default) as TOML, to copy
    /// and extend.
    Show,

    /// Load a policy and report its roles, or the first error with its file and line.
    Check {
        /// The policy file.
        file: PathBuf,
    },

    /// Show the decision for one access to one path, and the rule that makes it (and, with
    /// `--tool`, whether the role may call that tool). Exit status: 0 allowed (or asked), 1
    /// denied.
    Explain {
        /// The role asking.
        #[arg(long)]
        role: String,

        /// The access: read, list, write or delete.
        #[arg(long, value_parser = ["read", "list", "write", "delete"])]
        access: String,

        /// `[POLICY] PATH`: the workspace-relative path (normalised lexically: `src/../docs/x`
        /// is `docs/x`), after the policy file to load, as `policy check` takes it [default
        /// policy: `--policy`, else the built-in default].
        #[arg(value_name = "[POLICY] PATH", num_args = 1..=2, required = true)]
        targets: Vec<String>,

        /// Decide as for a call of this tool (rules that name it apply and outrank the others).
        #[arg(long)]
        tool: Option<String>,

        /// Decide as for a session bound to this task (`CHAIN-ID/NNN-slug`).
        #[arg(long, value_name = "CHAIN/TASK")]
        task: Option<String>,

        /// Print the decision as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A lease length: plain seconds (`90`) or a duration with its unit (`90s`, `5m`).
fn parse_ttl(text: &str) -> Result<std::time::Duration, String> {
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return text.parse::<u64>().map(std::time::Duration::from_secs).map_err(|error| format!("{text:?}: {error}"));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("{text:?} is not a duration ({error}): write seconds (`90`) or e.g. `90s`, `5m`, `1h`"))
}
