//! The append-only file (WIP: documented fully once its pieces land).
// Not wired into the server yet: the server's startup, dispatch and INFO call this module in
// the next step. Remove this allow then.
#![allow(dead_code)]

pub mod manifest;
