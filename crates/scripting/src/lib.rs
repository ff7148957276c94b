//! Lua 5.1 scripting as Valkey embeds it: EVAL scripts and FUNCTION libraries, the `redis.*`
//! API, the cjson/cmsgpack/bit/struct libraries and the RESP <-> Lua conversion rules.
//!
//! The crate knows nothing of the keyspace: a script reaches the server through the [`Host`]
//! seam the server implements, so the engine's slot locks and write stream stay where they
//! are.

pub mod body;
pub mod cache;
pub mod convert;
pub mod functions;
pub mod ldb;
pub mod libs;
mod raw;
mod strip;
pub mod vm;

pub use body::{Sha, flag, sha1_hex};
pub use cache::{Script, ScriptCache};
pub use functions::{FnDef, Functions, Library, RestorePolicy};
pub use vm::{Call, Host, LogLevel, Outcome, Vm, lua_memory, with_vm};

#[cfg(test)]
mod vm_tests;
