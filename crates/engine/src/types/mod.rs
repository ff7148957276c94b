//! Value types beyond strings, each in its own module with its compact and large encodings,
//! independent of commands.

pub mod dict;
pub mod hash;
pub mod intset;
pub mod list;
pub mod listpack;
pub mod lpentry;
pub mod packed;
pub mod sample;
pub mod set;
pub mod skiplist;
pub mod stream;
pub mod stream_group;
pub mod zset;
