//! End-to-end tests: a primary and replica links over in-memory streams.
