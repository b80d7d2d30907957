//! The policy in force, swapped whole when the operator reloads it (`toolcell serve` on
//! SIGHUP): a call takes the policy once, when it starts, and keeps it to its end; calls that
//! start after a reload take the new one. A policy that does not parse, or does not fit the
//! loaded tools, is refused and the one in force stays.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use toolcell_policy::Policy;

use crate::builder::compile_policy;
use crate::{Error, Runtime};

/// The policy in force and its generation (bumped at each reload, so that what was cached
/// for one policy is never taken for another).
pub(crate) struct PolicySlot {
    current: RwLock<(u64, Option<Arc<Policy>>)>,
}

/// The policy a call goes by, taken once when it starts.
#[derive(Clone)]
pub(crate) struct InForce {
    /// Which reload it came from (0: the one loaded at start).
    pub(crate) generation: u64,
    /// `None`: no policy, only the workspace boundary applies.
    pub(crate) policy: Option<Arc<Policy>>,
}

impl PolicySlot {
    pub(crate) fn new(policy: Option<Arc<Policy>>) -> Self {
        Self { current: RwLock::new((0, policy)) }
    }

    /// The policy in force now, `None` without one.
    pub(crate) fn current(&self) -> Option<Arc<Policy>> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).1.clone()
    }

    /// The policy in force now and its generation: what one call goes by from start to end.
    pub(crate) fn in_force(&self) -> InForce {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        InForce { generation: current.0, policy: current.1.clone() }
    }

    fn replace(&self, policy: Arc<Policy>) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        *current = (current.0 + 1, Some(policy));
    }
}

impl Runtime {
    /// Put the policy `text` (named `file` in refusals and audit records) in force for the
    /// calls that start from now on; calls already running finish under the policy they
    /// started with. Sessions, locks and the audit trail stay.
    ///
    /// # Errors
    ///
    /// [`Error::Policy`] if `text` does not parse or names tools that are not loaded,
    /// [`Error::PinMismatch`] if it pins a loaded component to other bytes, and
    /// [`Error::Configuration`] if the runtime runs without a policy or the new one links
    /// components differently (`stub_imports`, which take a restart). The policy in force
    /// is kept on every error.
    pub fn reload_policy(&self, file: &str, text: &str) -> Result<(), Error> {
        let Some(old) = self.policy.current() else {
            return Err(Error::Configuration {
                problem: "this host runs without a policy, so there is none to reload".to_owned(),
                hint: "start it with `--policy` to have one".to_owned(),
            });
        };
        let Some(new) = compile_policy(Some((file.to_owned(), text.to_owned())), &self.tools, &self.loaded)? else {
            return Ok(());
        };
        // Components are linked once, at load: a change of what they may link as stubs
        // cannot take effect without loading them again.
        if let Some(tool) = self.tools.keys().find(|tool| old.stub_imports(tool) != new.stub_imports(tool)) {
            return Err(Error::Configuration {
                problem: format!("the new policy changes `stub_imports` of `{tool}`, which are linked at start"),
                hint: "restart the host to change them".to_owned(),
            });
        }
        self.policy.replace(new);
        Ok(())
    }

    /// [`reload_policy`](Self::reload_policy) with the text of the file at `path`, named by
    /// its file name alone (as at start).
    ///
    /// # Errors
    ///
    /// [`Error::PolicyFile`] if the file cannot be read; otherwise as
    /// [`reload_policy`](Self::reload_policy).
    pub fn reload_policy_file(&self, path: &Path) -> Result<(), Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::PolicyFile { path: path.to_path_buf(), source })?;
        self.reload_policy(&crate::builder::policy_name(path), &text)
    }
}
