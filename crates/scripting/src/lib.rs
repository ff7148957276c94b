//! Lua 5.1 scripting as Valkey embeds it: EVAL scripts and FUNCTION libraries, the `redis.*`
//! API, the cjson/cmsgpack/bit/struct libraries and the RESP <-> Lua conversion rules.
//!
//! The crate knows nothing of the keyspace: a script reaches the server through the
//! [`Host`]-style seam the server implements, so the engine's slot locks and write stream stay
//! where they are.
pub mod libs;
