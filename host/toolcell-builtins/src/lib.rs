//! The built-in toolcell tools, as WebAssembly component bytes.
//!
//! The build script compiles `guest-tools/` for `wasm32-wasip2` (it needs
//! `rustup target add wasm32-wasip2`) and embeds the results, so a `toolcell` binary carries
//! its tools with it. The host loads them exactly as it loads a third party's component.
//!
//! ```
//! let names: Vec<&str> = toolcell_builtins::components().map(|(name, _)| name).collect();
//! assert!(names.contains(&"read_file"));
//! ```

mod generated {
    include!(concat!(env!("OUT_DIR"), "/builtins.rs"));
}

/// `(name, component bytes)` of every built-in tool, in a fixed order.
pub fn components() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    generated::COMPONENTS.iter().copied()
}
