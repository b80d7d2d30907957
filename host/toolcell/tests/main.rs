//! The `toolcell` binary's tests, as users, clients and attackers run it: one test binary,
//! each file a module (`cargo test --workspace --test binary cli::` runs one). Each file was a
//! binary of its own, every one linking the same test support; one saves the links and their
//! disk.

mod attack_i40;
mod attack_trusted;
mod cli;
mod container;
mod mcp;
mod network;
mod paths;
mod plugins;
mod registry;
mod report;
mod resources;
mod serve_bounds;
mod serve_cluster;
mod serve_edges;
mod serve_oauth;
mod serve_ops;
mod stdio;
mod trusted;
mod walkthroughs;

// Helpers the modules above share.
#[expect(dead_code, reason = "the load generator is the serve benchmark's; these tests use its client")]
mod load;
mod python_mcp;
mod served;
