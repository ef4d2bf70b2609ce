//! Encryption at rest and redaction by crypto-shredding, through the real journal on a real
//! directory: content sealed on append and opened on every read, a session, an event and a run
//! redacted, then `verify`, proofs, reads and a reopen, with every file of the journal's
//! directory scanned for the redacted plaintext and the destroyed keys' bytes.

mod common;

use std::path::Path;

use journal_engine::seams::SystemEntropy;
use journal_engine::{
    Chain, Encryption, Error, Filter, Journal, MasterKey, Options, Redaction, Subject,
    VerifyOptions,
};
use journal_format::proof::check_inclusion;
use journal_format::{Envelope, Position};
use journal_testkit::disk;
use serde_json::{json, Value};

fn options(master: &MasterKey) -> Options {
    Options {
        encryption: Some(Encryption {
            master: master.clone(),
            subject: Subject::Session,
        }),
        ..Options::default()
    }
}

/// An event carrying `secret` in its content: a tool result's output, its status reason and
/// an unknown field.
fn secret_event(id: &str, session: &str, run: &str, secret: &str) -> Envelope {
    let mut e = Envelope::new("tool.completed", id, "2026-05-11T10:00:00Z");
    e.session_id = Some(session.into());
    e.run_id = Some(run.into());
    e.tool_call_id = Some(format!("call-{id}"));
    e.status = Some("succeeded".into());
    e.status_reason = Some(format!("reason {secret}"));
    e.payload = Some(json!({"toolName": "bash", "output": secret, "exitCode": 0}));
    e.extra
        .insert("vendorNote".into(), json!(format!("note {secret}")));
    e
}

fn read_all(journal: &Journal) -> Vec<journal_format::StoredEvent> {
    journal
        .read(Position::FIRST, None, Chain::Verified)
        .collect::<Result<_, _>>()
        .expect("reads")
}

#[test]
fn sealed_content_reads_back_as_written_through_every_read_and_is_not_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let master = MasterKey::generate(&SystemEntropy);
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    let mut events = vec![secret_event("e1", "s1", "r1", "SECRET-ONE")];
    // Every shape of payload: an object of content and metadata, content only, metadata
    // only, a string, an array, null, none; typed objects and unknown fields.
    let payloads = [
        Some(json!({"title": "SECRET-TITLE", "objective": "SECRET-OBJ", "taskType": "build"})),
        Some(json!({"decision": "approve", "decidedBy": "user:bob"})),
        Some(json!("SECRET-STRING")),
        Some(json!(["SECRET-ARRAY", 1, {"x": null}])),
        Some(Value::Null),
        None,
    ];
    for (i, payload) in payloads.into_iter().enumerate() {
        let mut e = common::event(i as u64, "s1");
        // A vendor type takes any payload.
        e.event_type = "vendor.acme.note".into();
        e.payload = payload;
        e.output = Some(Box::new(
            json!({"text": "SECRET-OUTPUT"})
                .as_object()
                .unwrap()
                .clone(),
        ));
        e.task = Some(Box::new(
            json!({"status": "running"}).as_object().unwrap().clone(),
        ));
        events.push(e);
    }
    // A producer's event of the redaction fact's type is encrypted like any other.
    let mut fake = Envelope::new("journal.redacted", "fake", "2026-05-11T10:00:00Z");
    fake.session_id = Some("s1".into());
    fake.payload = Some(json!({"reason": "SECRET-FAKE"}));
    events.push(fake);
    common::append(&journal, events.clone());
    let read = read_all(&journal);
    assert_eq!(read.len(), events.len());
    for (stored, given) in read.iter().zip(&events) {
        assert_eq!(
            serde_json::to_value(&stored.envelope).unwrap(),
            serde_json::to_value(given).unwrap()
        );
    }
    let got = journal.get("e1").unwrap().unwrap();
    assert_eq!(got.envelope, events[0]);
    let session: Vec<_> = journal
        .query(Filter {
            session: Some("s1".into()),
            ..Filter::default()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(session.len(), events.len());
    assert_eq!(
        journal.get_position(Position(1)).unwrap().envelope,
        events[0]
    );
    // A duplicate is recognised by its sealed bytes.
    let again = common::append(&journal, vec![events[0].clone()]);
    assert!(again[0].duplicate);
    journal.close();
    for secret in [
        "SECRET-ONE",
        "SECRET-TITLE",
        "SECRET-STRING",
        "SECRET-ARRAY",
        "SECRET-OUTPUT",
    ] {
        assert_eq!(
            disk::holding(dir.path(), secret.as_bytes()).unwrap(),
            Vec::<String>::new(),
            "{secret}"
        );
    }
    // Metadata stays readable in the stored bytes.
    assert!(!disk::holding(dir.path(), b"decidedBy").unwrap().is_empty());
}

#[test]
fn a_redacted_session_reads_redacted_verifies_proves_and_leaves_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let master = MasterKey::generate(&SystemEntropy);
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    let mut events = Vec::new();
    for i in 0..50 {
        events.push(secret_event(
            &format!("a{i}"),
            "s1",
            "r1",
            &format!("SECRET-A-{i:02}"),
        ));
        events.push(secret_event(
            &format!("b{i}"),
            "s2",
            "r2",
            &format!("KEEP-B-{i:02}"),
        ));
    }
    common::append(&journal, events);
    let (key, wrapped) = disk::data_key(dir.path(), &master.to_hex(), "session:s1/1").unwrap();
    let redacted = journal
        .redact(
            &Redaction::Session("s1".into()),
            "alice",
            Some("erasure request"),
        )
        .unwrap();
    assert_eq!(redacted.events, 50);
    assert_eq!(redacted.keys_destroyed, ["session:s1/1"]);
    let check = |journal: &Journal| {
        for event in read_all(journal) {
            let e = &event.envelope;
            match e.session_id.as_deref() {
                Some("s1") if e.event_type == "journal.redacted" => {
                    assert_eq!(e.payload.as_ref().unwrap()["by"], "alice");
                    assert_eq!(e.payload.as_ref().unwrap()["reason"], "erasure request");
                }
                Some("s1") => {
                    let payload = e.payload.as_ref().unwrap();
                    assert_eq!(payload["output"], "[redacted]");
                    assert_eq!(payload["toolName"], "bash", "metadata stays");
                    assert_eq!(e.status.as_deref(), Some("succeeded"));
                    assert_eq!(e.status_reason.as_deref(), Some("[redacted]"));
                    assert_eq!(e.extra["redacted"]["reason"], "erasure request");
                    assert_eq!(e.extra["redacted"]["factEventId"], &*redacted.fact.event_id);
                }
                _ => assert!(e.payload.as_ref().unwrap()["output"]
                    .as_str()
                    .unwrap()
                    .starts_with("KEEP-B-")),
            }
        }
        let report = journal
            .verify(&VerifyOptions::default(), &mut |_, _| {})
            .unwrap();
        assert!(report.ok, "{:?}", report.problems);
        let size = journal.tree_head().unwrap().position.0;
        for position in [1, 2, 99, size] {
            let proof = journal
                .inclusion_document_at(Position(position), None)
                .unwrap();
            check_inclusion(&proof, &[]).expect("the proof holds");
        }
    };
    check(&journal);
    journal.close();
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    check(&journal);
    // New events of the session get a new key, readable.
    common::append(&journal, vec![secret_event("a-late", "s1", "r1", "LATER")]);
    let late = journal.get("a-late").unwrap().unwrap();
    assert_eq!(late.envelope.payload.unwrap()["output"], "LATER");
    journal.close();
    for needle in [&b"SECRET-A-"[..], &key[..], wrapped.as_bytes()] {
        assert_eq!(
            disk::holding(dir.path(), needle).unwrap(),
            Vec::<String>::new()
        );
    }
}

#[test]
fn redacting_an_event_or_a_run_keeps_the_rest_of_its_session_readable() {
    let dir = tempfile::tempdir().unwrap();
    let master = MasterKey::generate(&SystemEntropy);
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    let events = vec![
        secret_event("x1", "s1", "r1", "SECRET-X1"),
        secret_event("x2", "s1", "r1", "SECRET-X2"),
        secret_event("x3", "s1", "r2", "SECRET-X3"),
        secret_event("x4", "s1", "r3", "KEEP-X4"),
    ];
    common::append(&journal, events);
    let (key, wrapped) = disk::data_key(dir.path(), &master.to_hex(), "session:s1/1").unwrap();
    let one = journal
        .redact(&Redaction::Event("x3".into()), "bob", None)
        .unwrap();
    assert_eq!(one.events, 1);
    assert!(
        one.keys_destroyed.is_empty(),
        "the others' keys are kept one by one"
    );
    let run = journal
        .redact(&Redaction::Run("r1".into()), "bob", Some("leak"))
        .unwrap();
    assert_eq!(run.events, 2);
    let output = |journal: &Journal, id: &str| {
        journal.get(id).unwrap().unwrap().envelope.payload.unwrap()["output"].clone()
    };
    journal.close();
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    for id in ["x1", "x2", "x3"] {
        assert_eq!(output(&journal, id), "[redacted]", "{id}");
    }
    assert_eq!(output(&journal, "x4"), "KEEP-X4");
    let facts: Vec<_> = journal
        .query(Filter {
            type_prefix: Some("journal.redacted".into()),
            ..Filter::default()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(facts.len(), 2);
    assert_eq!(facts[1].envelope.run_id.as_deref(), Some("r1"));
    assert!(
        journal
            .verify(&VerifyOptions::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
    // Redacting what is already redacted finds nothing sealed to destroy.
    journal.close();
    for needle in [&b"SECRET-X"[..], &key[..], wrapped.as_bytes()] {
        assert_eq!(
            disk::holding(dir.path(), needle).unwrap(),
            Vec::<String>::new()
        );
    }
}

#[test]
fn events_from_before_encryption_read_as_plaintext_marked_and_cannot_be_shredded() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), common::small_segments()).unwrap();
    common::append(&journal, vec![secret_event("p1", "s1", "r1", "OLD-PLAIN")]);
    journal.close();
    let master = MasterKey::generate(&SystemEntropy);
    // Without the key, an encrypted journal does not open for writing; before, it is plain.
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    common::append(&journal, vec![secret_event("p2", "s1", "r1", "NEW-SEALED")]);
    let old = journal.get("p1").unwrap().unwrap().envelope;
    assert_eq!(old.extra["unencrypted"], true);
    assert_eq!(old.payload.unwrap()["output"], "OLD-PLAIN");
    assert!(!journal
        .get("p2")
        .unwrap()
        .unwrap()
        .envelope
        .extra
        .contains_key("unencrypted"));
    match journal.redact(&Redaction::Session("s1".into()), "bob", None) {
        Err(Error::InvalidInput(message)) => assert!(
            message.contains("before the journal was encrypted"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    journal.close();
    match Journal::open(dir.path(), common::small_segments()) {
        Err(Error::InvalidInput(message)) => {
            assert!(message.contains("give its master key"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let other = MasterKey::generate(&SystemEntropy);
    assert!(matches!(
        Journal::open(dir.path(), options(&other)),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn a_rotated_master_key_opens_the_journal_and_the_old_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let old = MasterKey::generate(&SystemEntropy);
    let journal = Journal::open(dir.path(), options(&old)).unwrap();
    common::append(&journal, vec![secret_event("k1", "s1", "r1", "ROTATED")]);
    journal
        .redact(&Redaction::Event("k1".into()), "bob", None)
        .ok();
    common::append(&journal, vec![secret_event("k2", "s1", "r1", "STILL-HERE")]);
    // The frames, without the zeros the tail segment is filled with ahead of them.
    let frames = |dir: &Path| {
        common::segment_files(dir)
            .iter()
            .map(|p| {
                let mut bytes = std::fs::read(p).unwrap();
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
                blake3::hash(&bytes)
            })
            .collect::<Vec<_>>()
    };
    let segments_before = frames(dir.path());
    let new = MasterKey::generate(&SystemEntropy);
    journal.rotate_master_key(&new).unwrap();
    journal.close();
    let segments_after = frames(dir.path());
    assert_eq!(segments_before, segments_after, "the log is not touched");
    assert!(Journal::open(dir.path(), options(&old)).is_err());
    let journal = Journal::open(dir.path(), options(&new)).unwrap();
    let k2 = journal.get("k2").unwrap().unwrap().envelope;
    assert_eq!(k2.payload.unwrap()["output"], "STILL-HERE");
    assert_eq!(journal.key_status().unwrap()["master"], new.id());
}

/// An event sent again to an encrypted journal is answered as a duplicate when it is the same
/// event: sealed the same (its bytes equal), with its content's keys in another order, or
/// stored in plaintext before the journal was encrypted; with other content it is refused.
/// Inside one request, as against the stored event.
#[test]
fn an_event_sent_again_is_a_duplicate_however_its_content_is_ordered_or_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Journal::open(dir.path(), common::small_segments()).unwrap();
    common::append(&plain, vec![secret_event("p1", "s1", "r1", "OLD")]);
    plain.close();
    let master = MasterKey::generate(&SystemEntropy);
    let journal = Journal::open(dir.path(), options(&master)).unwrap();
    let mut first = secret_event("e1", "s1", "r1", "SAME");
    first.payload =
        Some(json!({"toolName": "bash", "output": "SAME", "stderr": "", "exitCode": 0}));
    // The content keys (`output`, `stderr`) in the other order: other sealed bytes.
    let mut reordered = first.clone();
    reordered.payload =
        Some(json!({"exitCode": 0, "stderr": "", "output": "SAME", "toolName": "bash"}));
    let stored = journal
        .append_batch_blocking(vec![first.clone(), reordered.clone()], Default::default())
        .expect("one request, the event twice");
    assert!(!stored[0].duplicate && stored[1].duplicate);
    for again in [
        first.clone(),
        reordered,
        secret_event("p1", "s1", "r1", "OLD"),
    ] {
        let answer = journal
            .append_batch_blocking(vec![again], Default::default())
            .expect("a duplicate");
        assert!(answer[0].duplicate, "{answer:?}");
    }
    let other = secret_event("e1", "s1", "r1", "OTHER");
    match journal.append_batch_blocking(vec![other], Default::default()) {
        Err(Error::IdReused { event_id, .. }) => assert_eq!(event_id, "e1"),
        answer => panic!("another event with the id: {answer:?}"),
    }
    let mut other_order = first;
    other_order.payload = Some(json!({"output": "OTHER", "toolName": "bash", "exitCode": 0}));
    assert!(matches!(
        journal.append_batch_blocking(vec![other_order], Default::default()),
        Err(Error::IdReused { .. })
    ));
    assert_eq!(read_all(&journal).len(), 2, "p1 and e1, once each");
}
