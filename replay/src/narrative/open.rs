//! The steps of a narrative still open while it is built: tool and model calls without a
//! result, approvals not resolved, subagents and processes not ended.

use std::collections::BTreeMap;

/// Steps still open, by the id that will close them: an index into the builder's steps.
#[derive(Default)]
pub(super) struct Open {
    /// Tool calls without a result, by `toolCallId`.
    pub(super) tools: BTreeMap<String, usize>,
    /// Model calls without a result, by `modelRequestId`.
    pub(super) models: BTreeMap<String, usize>,
    /// Approvals not resolved, by `actionId`.
    pub(super) actions: BTreeMap<String, usize>,
    /// Subagents not ended, by `subagentId`.
    pub(super) subagents: BTreeMap<String, usize>,
    /// Processes not ended, by `processId`.
    pub(super) processes: BTreeMap<String, usize>,
}
