//! The embedding API's tests, one binary: each links the host, wasmtime and the built-in
//! components, so one binary instead of one per file saves the links and their disk.

mod example;
mod first_calls;
mod providers;
mod schemas;
mod sessions;
