//! hotkv's cluster: the node table, slot ownership, the gossip bus's wire format and the
//! `nodes.conf` file, as Redis Cluster defines them (docs/cluster.md has the design).
//!
//! What it owns: which node serves which of the 16384 slots, every node's identity, epochs,
//! flags and addresses, and the bytes nodes exchange. What it must not depend on: the server
//! crate (it implements the engine's routing trait instead, and the server wires it in) and
//! the TLS crate (the bus asks the server for a connector). Every length or count in a frame
//! from another node is checked against what the frame holds before anything is allocated.

pub mod bus;
pub mod node;
pub mod nodes_conf;
pub mod router;
pub mod slots;
pub mod state;
pub mod wire;

pub use node::{Node, NodeFlags, NodeId};
pub use slots::{SLOTS, SlotSet};
