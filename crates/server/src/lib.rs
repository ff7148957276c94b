//! The hotkv server: configuration, listeners, connections, dispatch and the commands that
//! concern the server rather than the data.

pub mod config;
