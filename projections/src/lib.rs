//! Read models rebuilt from the log by projection workers, with honest freshness.
//!
//! NOTE: not built yet. This crate is where the read models of MODEL.md §5 will live; it will
//! read the log only through `journal-engine`'s public API (subscriptions and range reads) and
//! never open segment files. Until then it exports nothing.

#![forbid(unsafe_code)]
