//! In-crate integration tests of hotkv-tls: one binary, a module per area (STYLE.md §6).
//! Every test makes its own PKI (rcgen, and the openssl CLI for encrypted keys) in a temp dir.

mod check;
mod handshake;
mod interop;
mod links;
mod load;
mod pki;
mod reload;
mod support;
