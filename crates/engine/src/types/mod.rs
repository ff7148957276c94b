//! Value types beyond strings, each in its own module with its compact and large encodings.

pub mod hash;
pub mod set;
pub mod packed;
pub mod intset;
pub mod dict;
pub mod sample;
