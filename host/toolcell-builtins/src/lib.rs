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

#[cfg(feature = "precompiled")]
mod precompiled {
    include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));
}

/// The built-in tool `name` compiled to machine code for the build's target by wasmtime's
/// `Engine::precompile_component`, with the `precompiled` feature (else `None`). Loading it
/// runs its code natively: it is as trusted as this binary, and an engine that does not match
/// the one it was made with refuses it (then the component is compiled).
pub fn precompiled(name: &str) -> Option<&'static [u8]> {
    #[cfg(feature = "precompiled")]
    {
        precompiled::PRECOMPILED.iter().find(|(built, _)| *built == name).map(|(_, artifact)| *artifact)
    }
    #[cfg(not(feature = "precompiled"))]
    {
        let _ = name;
        None
    }
}
