//! Who the service's static tokens stand for, replaced whole when the configuration is reloaded
//! (SIGHUP): requests already authenticated keep the principal they had, sessions stay.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use super::Service;
use crate::config::{Principal, ServiceConfig};

/// The principals of a configuration, by token and by name.
pub(super) struct Roster {
    /// The principals by the SHA-256 of their token.
    pub(super) by_token: HashMap<[u8; 32], Arc<Principal>>,
    /// The principals by name.
    pub(super) by_name: HashMap<String, Arc<Principal>>,
    /// The principal of requests without a token, if the configuration names one.
    pub(super) anonymous: Option<Arc<Principal>>,
}

impl Roster {
    pub(super) fn of(config: &ServiceConfig) -> Roster {
        let principals: Vec<Arc<Principal>> = config.principals.iter().cloned().map(Arc::new).collect();
        let by_token = principals.iter().filter_map(|principal| Some((principal.token_sha256?, Arc::clone(principal)))).collect();
        let by_name = principals.iter().map(|principal| (principal.name.clone(), Arc::clone(principal))).collect();
        let anonymous = config.anonymous.as_ref().and_then(|name| principals.iter().find(|principal| &principal.name == name).cloned());
        Roster { by_token, by_name, anonymous }
    }
}

impl Service {
    /// The principals now.
    pub(super) fn roster(&self) -> Arc<Roster> {
        Arc::clone(&self.roster.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Take the principals of `config` (a reloaded configuration) in place of the ones in use;
    /// the rest of it (workspaces, bounds, `[oauth]`, where to listen) takes a restart.
    ///
    /// # Errors
    ///
    /// A message naming the principal (and its line) whose workspace is not served or whose
    /// role the policy does not define; the principals in use are kept then.
    pub fn reload(&self, config: &ServiceConfig) -> Result<usize, String> {
        Service::check_principals(config, &self.hosts)?;
        let roster = Roster::of(config);
        let count = roster.by_name.len();
        *self.roster.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(roster);
        Ok(count)
    }
}
