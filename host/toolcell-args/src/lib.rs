//! A tool call's arguments before any component runs, without wasmtime and without the disk:
//! the tool's compiled argument schema ([`schema::ArgsSchema`]), and the paths clients send
//! made workspace-relative ([`client_paths`]), and the provider tools the host adapts to calls of
//! its governed tools ([`adapters`]), and how the tools the host implements describe themselves
//! ([`host_tools`]).
//!
//! ```
//! use toolcell_args::client_paths::{Roots, rewrite};
//! use toolcell_args::schema::ArgsSchema;
//!
//! let (schema, _) = ArgsSchema::compile(r#"{"type": "object", "properties": {"path": {"type": "string"}}}"#).unwrap();
//! assert!(schema.check("read_file", r#"{"path": "src/main.rs"}"#).is_ok());
//! assert!(schema.check("read_file", r#"{"path": 3}"#).is_err());
//!
//! let roots = Roots { canonical: "/home/me/repo".as_ref(), given: None };
//! assert_eq!(rewrite(r#"{"path": "/home/me/repo/src/main.rs"}"#, &roots).as_deref(), Some(r#"{"path":"src/main.rs"}"#));
//! ```

pub mod adapters;
pub mod client_paths;
pub mod host_tools;
pub mod schema;

pub use schema::{ArgsSchema, MAX_ARGS_BYTES};
