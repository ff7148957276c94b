//! Data structures of the collection types, independent of commands.

pub mod listpack;
pub mod list;
pub mod skiplist;
pub mod zset;
