//! Run narratives for review (MODEL.md §6) and their exports.
//!
//! NOTE: not built yet. This crate will turn the events of a run, task or session into an
//! ordered narrative of observed and inferred steps, with gaps shown as gaps. Until then it
//! exports nothing.
