//! [`Scope`]: where a command writes (its session and the ids it names), shared by every
//! subject module and the command type.

use schemars::JsonSchema;
use serde::Deserialize;

/// Where a command writes: a session, and the runtime and thread to stamp on its events.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// The session (the stream). Task commands may omit it for a task that has none.
    pub session_id: Option<String>,
    /// The runtime, stamped on the events.
    pub runtime_id: Option<String>,
    /// The thread, stamped on the events.
    pub thread_id: Option<String>,
}
