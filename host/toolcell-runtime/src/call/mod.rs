//! One call, top to bottom: [`Runtime::call`] and the steps it runs, in order.
//!
//! 1. [`tool_for`](Runtime::tool_for): the loaded tool the request names;
//! 2. [`gate`](Runtime::gate): may the caller's role call it at all (no instance is made if not);
//! 3. the arguments: paths clients send as absolute paths or `file://` URIs into the workspace
//!    made workspace-relative ([`client_paths`]), then checked against the tool's schema (the
//!    component never sees bad ones);
//! 4. [`guard_for`](Runtime::guard_for): the guard for this call: policy, audit sink, host-owned
//!    paths, and the transaction (locks, reads, journal);
//! 5. [`run`](Runtime::run): the component in a fresh store and instance
//!    ([`run_component`](Runtime::run_component)), or a host-implemented tool;
//! 6. [`account`](Runtime::account): what the guard saw decides the result (refusals, a flood,
//!    an audit failure);
//! 7. [`settle`](Runtime::settle): rewrites put in place, validators run
//!    ([`validate`](Runtime::validate)), then commit or roll back; what the session read and
//!    wrote recorded;
//! 8. [`finish`](Runtime::finish): the call's audit record.

pub(crate) mod ahead;
mod owned;
mod settle;
use std::time::Instant;

use toolcell_policy::{Durability, ReadBeforeWrite, ValidatorCheck};
use toolcell_types::{ToolError, ToolErrorKind, escape_control};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::capabilities::filesystem::{self, AuditSink, FsGuard, Transaction};
use crate::capabilities::{CallContext, CallState, CapturePipe, http};
use crate::error::describe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use toolcell_args::client_paths;

use crate::bindings::to_wit_error;
use crate::bindings::{convert_error, convert_output};
use crate::error::Error;
use crate::limits::{EPOCH_TICK, Limits};
use crate::outcome::{CallOutcome, CallRequest};
use crate::outcome::{denied_result, new_call_id, only_reads_refused, refusal_warnings};
use crate::reload::InForce;
use crate::runtime::{LoadedTool, Runtime, ToolKind};
use crate::{bindings, limits, native};
use toolcell_args::adapters;
use toolcell_policy::{Access, Effect, Policy};

/// Bytes of stdout and of stderr kept per call; the rest is counted and dropped.
pub const STDIO_CAPACITY: usize = 64 * 1024;

impl Runtime {
    /// Run one tool call in a fresh instance: one no call ran in before, instantiated now or,
    /// for a built-in tool, made ahead by the runtime's idle thread after the tool's previous
    /// call (the call's own guard, context, limits and deadline are put into its store before
    /// the tool is called; [`CallOutcome::instance_made_ahead`] says which).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTool`] for a tool that is not loaded; [`Error::Call`] if the host
    /// cannot set up the instance. Everything the tool itself gets wrong, including a trap, is
    /// in [`CallOutcome::result`].
    pub fn call(&self, request: &CallRequest<'_>) -> Result<CallOutcome, Error> {
        let started = Instant::now();
        // Calls a crash left open in this workspace are rolled back before any other runs.
        self.recover(request.workspace);
        // `chain:status` is `chain_status`: the call runs, and is audited, under the tool's name.
        let aliased;
        let request = match self.canonical_tool(request.tool) {
            Some(canonical) if canonical != request.tool => {
                aliased = CallRequest { tool: canonical, ..*request };
                &aliased
            }
            _ => request,
        };
        // The policy in force when the call starts is the call's to its end, whatever a reload
        // puts in force meanwhile.
        let in_force = self.policy.in_force();
        let tool = self.tool_for(request, in_force.policy.as_deref())?;
        let mut outcome = CallOutcome::new(new_call_id());
        if let Some(refusal) = self.gate(request, in_force.policy.as_deref())? {
            outcome.gated = true;
            outcome.result = Err(refusal);
            return Ok(self.finish(request, outcome, started));
        }
        // An absolute path or `file://` URI into the workspace reaches the component as its
        // workspace-relative path.
        let relative_paths = client_paths::rewrite(request.args, &request.workspace.roots());
        let request = match &relative_paths {
            Some(args) => &CallRequest { args, ..*request },
            None => request,
        };
        let without_nulls;
        let request = match tool.schema.check(request.tool, request.args) {
            Err(error) => {
                outcome.result = Err(error);
                return Ok(self.finish(request, outcome, started));
            }
            Ok(Some(args)) => {
                without_nulls = args;
                &CallRequest { args: &without_nulls, ..*request }
            }
            Ok(None) => request,
        };
        if let ToolKind::Adapter(adapter) = &tool.kind {
            let refuse = |kind, message| {
                let mut refused = CallOutcome::new(new_call_id());
                refused.result = Err(ToolError::new(kind, message));
                self.finish(request, refused, started)
            };
            let call = |tool: &str, args: &str| self.call(&CallRequest { tool, args, ..*request });
            let is_directory = |path: &str| request.workspace.directory.symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir());
            let governed =
                adapters::Governed { call: &call, text_editor_root: self.text_editor_root.as_deref(), is_directory: &is_directory };
            return adapter.call(&governed, request.args, &refuse);
        }
        let guard = self.guard_for(request, &in_force, &outcome.call_id)?;
        let guard = self.run(tool, request, guard, &mut outcome)?;
        let guard = self.account(tool, guard, &mut outcome);
        self.settle(request, &mut outcome, guard);
        if let Err(error) = &mut outcome.result
            && error.kind == ToolErrorKind::NotFound
            && let Some(hint) = client_paths::separator_hint(request.args)
        {
            error.hint = Some(hint);
        }
        Ok(self.finish(request, outcome, started))
    }

    /// The loaded tool a request names; the error lists only the tools the caller's role may
    /// call (the others are not the caller's to know of).
    fn tool_for(&self, request: &CallRequest<'_>, policy: Option<&Policy>) -> Result<&LoadedTool, Error> {
        let role = policy.and_then(|policy| policy.role(request.role));
        let callable = |name: &&String| policy.is_none() || role.is_some_and(|role| role.may_call(name));
        self.tools.get(request.tool).ok_or_else(|| Error::UnknownTool {
            name: request.tool.escape_default().to_string(),
            available: self.tools.keys().filter(callable).map(String::as_str).collect::<Vec<_>>().join(", "),
        })
    }

    /// Tool gating: the refusal if the caller's role may not call the tool (no instance is
    /// made); an error if the policy has no such role.
    fn gate(&self, request: &CallRequest<'_>, policy: Option<&Policy>) -> Result<Option<ToolError>, Error> {
        let Some(policy) = policy else {
            return Ok(None);
        };
        let role = policy.role(request.role).ok_or_else(|| Error::UnknownRole {
            role: request.role.escape_default().to_string(),
            roles: policy.roles().map(|role| role.name()).collect::<Vec<_>>().join(", "),
        })?;
        if role.may_call(request.tool) {
            return Ok(None);
        }
        let tools = role.tools().map(|tools| tools.join(", ")).unwrap_or_default();
        Ok(Some(
            ToolError::new(
                ToolErrorKind::Denied,
                format!("role `{}` may not call `{}`; its tools are: {tools}.", role.name(), request.tool),
            )
            .with_hint(format!("use one of those, or ask the operator for a role that has `{}`", request.tool)),
        ))
    }

    /// The guard of one call: the policy for the caller's role, the audit sink, the host-owned
    /// paths inside the workspace, and the transaction (locks, what the session read, the
    /// journal's place).
    fn guard_for(&self, request: &CallRequest<'_>, in_force: &InForce, call_id: &str) -> Result<FsGuard, Error> {
        let read_before_write = in_force.policy.as_ref().map_or(ReadBeforeWrite::Off, |policy| policy.read_before_write());
        let (seen, store_down) = if read_before_write == ReadBeforeWrite::Off {
            (Arc::default(), None)
        } else {
            self.reads.load_or_refusal(request.session_id, request.workspace.root())
        };
        let mut transaction = Transaction::new(
            Arc::clone(&self.locks),
            request.lock_owner().to_owned(),
            request.fences.to_vec(),
            seen,
            read_before_write,
            in_force.policy.as_ref().map_or_else(Durability::default, |policy| policy.durability()),
            Arc::clone(&self.journal),
            request.workspace.root().to_path_buf(),
            request.session_id.to_owned(),
            call_id.to_owned(),
        );
        transaction.stopped = self.writes_stopped(request.workspace).or(store_down);
        Ok(self.read_only_guard(request, in_force, call_id)?.with_transaction(transaction))
    }

    /// The guard of a call that may only read (a part of a split call): the policy for the
    /// caller's role, the audit sink and the host-owned paths, and no transaction, so every
    /// write and delete is refused.
    fn read_only_guard(&self, request: &CallRequest<'_>, in_force: &InForce, call_id: &str) -> Result<FsGuard, Error> {
        let bound = match &in_force.policy {
            None => None,
            // Closed: a role whose scoped rules could not be bound must not run as the role
            // without them.
            Some(_) => Some(self.bound_role(in_force, request.role, request.tool, request.task).ok_or_else(|| Error::Call {
                tool: request.tool.to_owned(),
                reason: format!("the policy's rules for role `{}` could not be bound for this call", request.role.escape_default()),
            })?),
        };
        Ok(FsGuard::new(None, request.role, request.approver.cloned(), Some(request.workspace.held()))
            .with_policy(in_force)
            .with_role(bound)
            .with_audit(self.audit_sink(request, call_id), self.host_paths_inside(request.workspace)?))
    }

    /// Run the tool: a component in a fresh instance, or a host-implemented tool. Fills the
    /// result (and for a component its trap flag, notes and stdio); returns the guard.
    fn run(&self, tool: &LoadedTool, request: &CallRequest<'_>, mut guard: FsGuard, outcome: &mut CallOutcome) -> Result<FsGuard, Error> {
        match &tool.kind {
            ToolKind::Component(code) => {
                let pre = code.get(&self.engine, &tool.origin)?;
                let workflow = toolcell_state::workflow::WorkflowCall {
                    shared: Arc::clone(&self.workflow),
                    workspace: request.workspace.root().to_path_buf(),
                    policy: guard.in_force().policy,
                    role: guard.bound_role(),
                    tool: request.tool.to_owned(),
                    principal: request.principal.map(str::to_owned),
                    spawned: std::sync::atomic::AtomicU32::new(0),
                };
                let context = CallContext {
                    role: request.role.to_owned(),
                    session_id: request.session_id.to_owned(),
                    call_id: outcome.call_id.clone(),
                    task: request.task.map(ToString::to_string),
                    workflow: Some(Arc::new(workflow)),
                    index: Some(toolcell_state::content_index::IndexScope {
                        store: Arc::clone(&self.indexes),
                        workspace: request.workspace.root().to_path_buf(),
                    }),
                    memo: Some((
                        Arc::clone(&self.memos),
                        toolcell_state::memo::Scope {
                            workspace: request.workspace.root().display().to_string(),
                            session: request.session_id.to_owned(),
                            tool: request.tool.to_owned(),
                        },
                    )),
                    ..CallContext::default()
                };
                let deadline = Instant::now() + self.limits_for(request.tool, guard.policy()).deadline;
                // Made ahead only for the tools the host ships (see `ahead`).
                let ahead = tool.origin.starts_with("builtin:");
                let parts = self.parts;
                let (guard, split) =
                    self.run_component(pre, request, CallContext { parts, ..context.clone() }, guard, outcome, deadline, ahead)?;
                match split {
                    Some(parts) if outcome.result.is_ok() => self.run_split(pre, request, &context, guard, outcome, parts, deadline),
                    _ => Ok(guard),
                }
            }
            ToolKind::Native(tool) => {
                outcome.result = native::run(
                    *tool,
                    &mut native::NativeCall {
                        request,
                        guard: &mut guard,
                        locks: &self.locks,
                        undo: &self.undo,
                        audit: self.audit.as_deref(),
                    },
                );
                Ok(guard)
            }
            // `call` hands an adapter its request before any guard exists.
            ToolKind::Adapter(_) => {
                Err(Error::Call { tool: request.tool.to_owned(), reason: "an adapter runs through the tools it adapts".to_owned() })
            }
        }
    }

    /// What the guard saw decides the result: a call stopped for flooding the audit trail is
    /// `too-large`; refusals make it `denied` (or `conflict`), except that a read-only tool
    /// that handled refused reads keeps its result with the refusals added as warnings; a
    /// record that could not be written withholds it. Moves the guard's events and refusals
    /// into the outcome.
    fn account(&self, tool: &LoadedTool, mut guard: FsGuard, outcome: &mut CallOutcome) -> FsGuard {
        guard.record_repeats();
        if let Some(message) = guard.flooded() {
            outcome.trapped = false;
            outcome.result = Err(ToolError::new(ToolErrorKind::TooLarge, message.to_owned()));
        }
        outcome.events = std::mem::take(&mut guard.events);
        outcome.unrecorded_events = guard.unrecorded_events;
        outcome.host_calls = guard.host_calls_made();
        outcome.denials = std::mem::take(&mut guard.denials);
        if !outcome.denials.is_empty() {
            if tool.info.annotations.read_only && outcome.result.is_ok() && only_reads_refused(&outcome.denials) {
                // A read-only tool that handled the refusal of some reads (a multi-file read, a
                // search) keeps its result; the host states the refusals itself, so the agent
                // learns of them whatever the component made of them.
                guard.warnings.extend(refusal_warnings(&outcome.denials));
            } else if guard.flooded().is_none() {
                outcome.result = Err(denied_result(&outcome.denials, &outcome.result));
            }
        }
        if guard.audit_failures > 0 {
            outcome.result = Err(audit_withheld());
        }
        guard
    }

    /// Run a call the component split (`context.split`): `parts` instances side by side, each
    /// told its part, under guards that may only read; then one more that assembles their
    /// results into the call's. Every part's decisions and refusals are the call's. A part
    /// that traps or overruns the deadline fails the call.
    #[expect(clippy::too_many_arguments, reason = "the pieces of one call, as `run` has them")]
    fn run_split(
        &self,
        pre: &bindings::PluginPre<CallState>,
        request: &CallRequest<'_>,
        context: &CallContext,
        mut guard: FsGuard,
        outcome: &mut CallOutcome,
        parts: u32,
        deadline: Instant,
    ) -> Result<FsGuard, Error> {
        let call_id = outcome.call_id.clone();
        // The parts share the call's memory limit: a split does not multiply it.
        let memory_pool = Some(Arc::default());
        // What the parts tell one another while they run (`shard-progress`).
        let shard_progress = Some(Arc::new(std::sync::Mutex::new(vec![Vec::new(); parts as usize])));
        let in_force = guard.in_force();
        let part = |shard: Option<(u32, u32)>, shard_results: Option<_>| -> Result<(CallOutcome, FsGuard), Error> {
            let mut part = CallOutcome::new(call_id.clone());
            let shard_progress = if shard.is_some() { shard_progress.clone() } else { None };
            let context =
                CallContext { parts: 0, shard, shard_results, shard_progress, memory_pool: memory_pool.clone(), ..context.clone() };
            let (guard, _) =
                self.run_component(pre, request, context, self.read_only_guard(request, &in_force, &call_id)?, &mut part, deadline, false)?;
            Ok((part, guard))
        };
        let ran: Vec<Result<(CallOutcome, FsGuard), Error>> = std::thread::scope(|scope| {
            let running: Vec<_> = (0..parts).map(|index| scope.spawn(move || part(Some((index, parts)), None))).collect();
            running
                .into_iter()
                .map(|running| {
                    running.join().unwrap_or_else(|_| {
                        Err(Error::Call {
                            tool: request.tool.to_owned(),
                            reason: "a part of the split call stopped unexpectedly".to_owned(),
                        })
                    })
                })
                .collect()
        });
        let mut results = Vec::with_capacity(ran.len());
        let mut failed = None;
        for ran in ran {
            let (ran, part_guard) = ran?;
            guard.absorb(part_guard);
            outcome.memory_bytes = outcome.memory_bytes.max(ran.memory_bytes);
            outcome.notes.extend(ran.notes);
            if ran.trapped && failed.is_none() {
                outcome.stderr = ran.stderr;
                failed = Some(ran.result);
                continue;
            }
            results
                .push(ran.result.map(|output| bindings::to_wit_output(&output)).map_err(|error| to_wit_error(error.kind, error.message)));
        }
        if let Some(failure) = failed {
            outcome.trapped = true;
            outcome.result = failure;
            return Ok(guard);
        }
        let (assembled, part_guard) = part(None, Some(results))?;
        guard.absorb(part_guard);
        outcome.result = assembled.result;
        outcome.trapped = assembled.trapped;
        outcome.memory_bytes = outcome.memory_bytes.max(assembled.memory_bytes);
        outcome.notes.extend(assembled.notes);
        outcome.images = assembled.images;
        outcome.stdout = assembled.stdout;
        outcome.stderr = assembled.stderr;
        Ok(guard)
    }

    /// Instantiate `pre` in a fresh store with `guard` on its filesystem and run one call,
    /// stopped at `deadline`. Fills the result, the trap flag, notes and stdio of `outcome`;
    /// returns the guard, and how many parts the component asked to be split into. With
    /// `ahead` (a built-in tool's own call, not a part or a validator), the instance is one
    /// made ahead for the tool if one is ready, and it is torn down, and the tool's next made,
    /// by the runtime's idle thread (see [`ahead`]).
    #[expect(clippy::too_many_arguments, reason = "the call's parts, each used once")]
    fn run_component(
        &self,
        pre: &bindings::PluginPre<CallState>,
        request: &CallRequest<'_>,
        context: CallContext,
        guard: FsGuard,
        outcome: &mut CallOutcome,
        deadline: Instant,
        ahead: bool,
    ) -> Result<(FsGuard, Option<u32>), Error> {
        let (tool, args, workspace) = (request.tool, request.args, request.workspace);
        let host_error = |error: wasmtime::Error| Error::Call { tool: tool.to_owned(), reason: describe(&error) };
        let stdout = CapturePipe::new(STDIO_CAPACITY);
        let stderr = CapturePipe::new(STDIO_CAPACITY);
        let mut wasi = WasiCtxBuilder::new();
        // The host runs calls on plain threads, so blocking filesystem calls run in place
        // instead of hopping to a worker thread.
        wasi.allow_blocking_current_thread(filesystem::BLOCKING_IN_PLACE).stdout(stdout.clone()).stderr(stderr.clone());
        // Behind the guard, the component's preopen is the guard's own workspace descriptor
        // (see `preopens::Host` in the guard); only the unguarded baseline opens it by path.
        if self.unguarded {
            wasi.preopened_dir(workspace.root(), ".", FsPerms::ReadWrite).map_err(host_error)?;
        }
        let limits = self.limits_for(tool, guard.policy());
        let mut guard = guard;
        guard.set_budget(tool, limits.host_calls, limits.open_files, limits.audit_records);
        guard.set_deadline(deadline);
        let limiter = limits::MemoryLimiter::pooled(limits.memory_bytes, context.memory_pool.clone());
        let http = http::CallHttp::for_call(&self.outbound, request.role, tool, guard.bound_role().as_deref());
        // A split call's parts share a memory budget their limiters add up as they grow: they
        // instantiate their own.
        let ahead = ahead && context.memory_pool.is_none();
        let state = CallState { wasi: wasi.build(), table: ResourceTable::new(), context, guard, limiter, deadline, http };
        let (mut store, made) = self.ahead.store(&self.engine, ahead.then_some(tool), state, limits.memory_bytes);
        // Each tick also checks whether the caller cancelled the call.
        limits::stop_at(&mut store, deadline.saturating_duration_since(Instant::now()), request.cancel.cloned());
        outcome.instance_made_ahead = made.is_some();
        let plugin = match made {
            Some(plugin) => plugin,
            None => pre.instantiate(&mut store).map_err(host_error)?,
        };
        let returned = plugin.toolcell_tool_tool().call_call(&mut store, args);
        let memory_refused = store.data().limiter.refused;
        outcome.memory_bytes = store.data().limiter.granted_bytes as u64;
        // Waits in the host end at the deadline (plus a tick) and return to the component; one
        // that then returns before the next epoch check still ran past its deadline.
        let overran = Instant::now() >= store.data().deadline + EPOCH_TICK;
        let cancelled = request.cancel.is_some_and(|cancel| cancel.load(Ordering::Relaxed));
        let stopped_by_host = store.data().guard.timed_out();
        outcome.result = match returned {
            Err(_) if cancelled => {
                outcome.trapped = true;
                Err(ToolError::new(
                    ToolErrorKind::Failed,
                    format!("`{tool}` was cancelled by the client and stopped; everything it changed was rolled back"),
                ))
            }
            _ if stopped_by_host => {
                outcome.trapped = true;
                Err(self.deadline_error(tool, &limits))
            }
            Ok(_) if overran => {
                outcome.trapped = true;
                Err(self.deadline_error(tool, &limits))
            }
            Ok(Ok(output)) => convert_output(tool, output, limits.output_bytes),
            Ok(Err(_)) | Err(_) if memory_refused => {
                outcome.trapped = returned.is_err();
                Err(ToolError::new(
                    ToolErrorKind::TooLarge,
                    format!(
                        "`{tool}` needed more than its memory limit of {} MiB and was stopped; nothing it returned is used.",
                        limits.memory_bytes >> 20
                    ),
                )
                .with_hint(format!(
                    "give it less to do at once (the operator can raise `memory_mib` under `[limits]` or `[limits.tools.{tool}]` in the policy)"
                )))
            }
            Ok(Err(error)) => Err(convert_error(error)),
            Err(trap) if trap.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                outcome.trapped = true;
                Err(self.deadline_error(tool, &limits))
            }
            Err(trap) => {
                outcome.trapped = true;
                Err(ToolError::new(
                    ToolErrorKind::Failed,
                    format!("the tool `{tool}` crashed ({}); nothing it returned is used.", trap.root_cause()),
                )
                .with_hint("this is a bug in the tool: try another approach, or report it"))
            }
        };
        let mut state = if ahead {
            let state = std::mem::replace(store.data_mut(), ahead::placeholder());
            self.ahead.tear_down(store);
            self.ahead.make(tool, pre, &self.engine, &limits);
            state
        } else {
            store.into_data()
        };
        state.http.account(&mut state.guard, std::mem::replace(&mut state.table, ResourceTable::new()));
        outcome.notes = state.context.notes;
        outcome.images = state.context.images;
        outcome.stdout = stdout.take();
        outcome.stderr = stderr.take();
        Ok((state.guard, state.context.split))
    }

    fn deadline_error(&self, tool: &str, limits: &Limits) -> ToolError {
        ToolError::new(
            ToolErrorKind::Failed,
            format!(
                "`{tool}` ran past its deadline of {:.1} s and was stopped; nothing it returned is used.",
                limits.deadline.as_secs_f64()
            ),
        )
        .with_hint(format!(
            "give it less to do at once (the operator can raise `deadline_ms` under `[limits]` or `[limits.tools.{tool}]` in the policy)"
        ))
    }

    /// The limits of a call of `tool`: the runtime's, with those of the call's `policy` (the
    /// one in force when it started, whatever a reload did since) over them.
    fn limits_for(&self, tool: &str, policy: Option<&Policy>) -> Limits {
        let Some(policy) = policy else {
            return self.limits;
        };
        let set = policy.limits_for(tool);
        Limits {
            deadline: set.deadline.unwrap_or(self.limits.deadline),
            memory_bytes: set.memory_bytes.unwrap_or(self.limits.memory_bytes),
            output_bytes: set.output_bytes.unwrap_or(self.limits.output_bytes),
            host_calls: set.host_calls.unwrap_or(self.limits.host_calls),
            open_files: set.open_files.unwrap_or(self.limits.open_files),
            audit_records: set.audit_records.unwrap_or(self.limits.audit_records),
        }
    }

    fn audit_sink(&self, request: &CallRequest<'_>, call_id: &str) -> Option<AuditSink> {
        self.audit.as_ref().map(|log| AuditSink {
            log: Arc::clone(log),
            session: request.session_id.to_owned(),
            tool: request.tool.to_owned(),
            call_id: call_id.to_owned(),
            workspace: request.workspace.root().display().to_string(),
            principal: request.principal.map(str::to_owned),
        })
    }

    /// Write the call's record and stamp its duration. A call whose record cannot be written
    /// does not return its result.
    fn finish(&self, request: &CallRequest<'_>, mut outcome: CallOutcome, started: Instant) -> CallOutcome {
        outcome.duration = started.elapsed();
        if outcome.result.is_err() {
            outcome.images.clear();
        }
        let Some(log) = &self.audit else {
            return outcome;
        };
        let status = match (&outcome.result, outcome.trapped, outcome.gated) {
            (_, true, _) => "trapped".to_owned(),
            (_, _, true) => "gated".to_owned(),
            (Ok(_), _, _) => "ok".to_owned(),
            (Err(error), _, _) => error.kind.as_str().to_owned(),
        };
        let mut record =
            toolcell_audit::Record::call(&toolcell_audit::now(), request.session_id, request.role, request.tool, &outcome.call_id, &status)
                .at(&request.workspace.root().display().to_string(), request.principal);
        let reads = outcome.events.iter().filter(|event| matches!(event.access, Access::Read | Access::List)).count();
        record.reads = Some(reads as u64 + outcome.unrecorded_events);
        record.duration_us = Some(u64::try_from(outcome.duration.as_micros()).unwrap_or(u64::MAX));
        record.notes.clone_from(&outcome.notes);
        match &outcome.result {
            Ok(output) => record.bytes = Some(output.text.len() as u64),
            Err(error) => record.message = Some(error.message.chars().take(1024).collect()),
        }
        // A call that changed nothing (or whose changes were all rolled back) may have its
        // record wait for a shared store that cannot be reached now; one that changed something
        // is recorded now or withheld.
        let modified = !outcome.rolled_back_whole
            && (outcome.events.iter().any(|event| event.effect == Effect::Allow && matches!(event.access, Access::Write | Access::Delete))
                || outcome.unrecorded_events > 0);
        let appended = if modified { log.append(&[record]) } else { log.append_deferrable(&[record]) };
        if appended.is_err() {
            outcome.result = Err(audit_withheld());
        }
        outcome
    }
}

/// A call whose audit record cannot be written: its result is withheld.
fn audit_withheld() -> ToolError {
    ToolError::new(ToolErrorKind::Failed, "the audit trail cannot be written, so this call's result is withheld")
        .with_hint("tell the operator: nothing is answered until the audit trail can be written again")
}
