//! The list of [`Envelope`](super::Envelope)'s optional fields and their stored names: the one
//! list the serde encoder and decoder (`envelope/codec.rs`), the stored-body encoder
//! (`envelope/encode.rs`) and decoder (`envelope/body.rs`) and their completeness test read.

/// Calls `$apply!` with every optional field of [`Envelope`], in declaration order, and its name
/// in the stored and JSON forms. The one list the encoder, the decoder and their completeness
/// test read.
macro_rules! optional_fields {
    ($apply:ident) => {
        $apply! {
            schema_version = "schemaVersion",
            runtime_id = "runtimeId",
            session_id = "sessionId",
            thread_id = "threadId",
            turn_id = "turnId",
            task_id = "taskId",
            run_id = "runId",
            attempt_id = "attemptId",
            parent_task_id = "parentTaskId",
            root_task_id = "rootTaskId",
            step_id = "stepId",
            tool_call_id = "toolCallId",
            action_id = "actionId",
            subagent_id = "subagentId",
            artifact_id = "artifactId",
            evidence_id = "evidenceId",
            request_id = "requestId",
            process_id = "processId",
            channel_id = "channelId",
            job_id = "jobId",
            job_item_id = "jobItemId",
            model_request_id = "modelRequestId",
            queue_id = "queueId",
            output_ref = "outputRef",
            trace_id = "traceId",
            span_id = "spanId",
            sequence = "sequence",
            status = "status",
            phase = "phase",
            native_status = "nativeStatus",
            status_reason = "statusReason",
            correlation_id = "correlationId",
            causation_id = "causationId",
            parent_event_id = "parentEventId",
            product_id = "productId",
            user_id = "userId",
            native_type = "nativeType",
            native_ns = "nativeNs",
            provenance = "provenance",
            idempotency_key = "idempotencyKey",
            payload = "payload",
            refs = "refs",
            task = "task",
            task_attempt = "taskAttempt",
            task_relationship = "taskRelationship",
            task_graph = "taskGraph",
            task_progress = "taskProgress",
            task_acceptance = "taskAcceptance",
            worker = "worker",
            delivery_state = "deliveryState",
            permission_decision = "permissionDecision",
            sandbox_profile = "sandboxProfile",
            routing_decision = "routingDecision",
            candidate_model_set = "candidateModelSet",
            task_profile = "taskProfile",
            limit_state = "limitState",
            limit_event = "limitEvent",
            cost_state = "costState",
            hook_run = "hookRun",
            execution_environment = "executionEnvironment",
            channel = "channel",
            job = "job",
            job_item = "jobItem",
            output = "output",
            history_boundary = "historyBoundary",
            telemetry = "telemetry",
            correlation = "correlation",
            benchmark = "benchmark",
            trajectory = "trajectory",
            reward = "reward",
            comparison = "comparison"
        }
    };
}

/// Whether the optional field stored as `name` holds a string (the others hold a number, an
/// enum, any JSON value, or an object): the rule the tests that build every field use.
#[cfg(test)]
pub(crate) fn holds_text(name: &str) -> bool {
    name.ends_with("Id")
        || name.ends_with("Ref")
        || name.ends_with("Key")
        || name.ends_with("Ns")
        || [
            "schemaVersion",
            "status",
            "phase",
            "nativeStatus",
            "statusReason",
            "nativeType",
        ]
        .contains(&name)
}
