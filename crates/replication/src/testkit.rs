//! Fakes for the tests: connector, applier and snapshot source.
