//! Outbound HTTP, set up once when the runtime is built: the policy's `[network]` limits, its
//! extra certificate authorities (`roots`, relative to the policy file) and the resolver.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolcell_net::{Outbound, StaticResolver, SystemResolver};

use super::{PolicySource, RuntimeBuilder};
use crate::error::Error;

impl RuntimeBuilder {
    /// The directory of the policy file, which `roots` and secret files are relative to.
    pub(super) fn policy_directory(&self) -> Option<PathBuf> {
        match &self.policy {
            Some(PolicySource::File(path)) => Some(path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)),
            _ => None,
        }
    }

    /// The outbound HTTP capability every call shares.
    pub(super) fn outbound(&mut self, policy_text: &Option<(String, String)>, directory: Option<&Path>) -> Result<Outbound, Error> {
        let resolver = self.resolver.take().unwrap_or_else(|| Arc::new(StaticResolver::new().with_fallback(Arc::new(SystemResolver))));
        let mut builder = Outbound::builder().resolver(resolver);
        if let Some((file, text)) = policy_text {
            let settings = toolcell_policy::network_settings(file, text)?;
            builder = builder.policy(&settings, directory).map_err(|error| Error::Network { reason: error.to_string() })?;
        }
        builder.build().map_err(|error| Error::Network { reason: error.to_string() })
    }
}
