//! RESP framing for hotkv.
//!
//! This crate owns the bytes on the wire and nothing else: a resumable request decoder that
//! turns a read buffer into argument vectors without copying them (multibulk and inline
//! forms, with Valkey's limits and error texts), a reply encoder that writes RESP2 or RESP3
//! into one reused buffer, and the quote-aware argument splitter shared by inline commands
//! and `.conf` files. It knows nothing about keys, commands or servers and must never depend
//! on another hotkv crate.

mod decode;
mod encode;
mod number;
mod split;

pub use decode::{Args, BIG_ARG, Decoder, INLINE_MAX_SIZE, Limits, ProtocolError, Step};
pub use encode::{Protocol, ReplyBuf, ReplyLimit};
pub use number::{format_double, fpconv_dtoa, parse_double, parse_i64, parse_long_double, parse_u64};
pub use split::{SplitError, repr, split_args};
