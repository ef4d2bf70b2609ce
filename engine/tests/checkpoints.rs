//! Signed checkpoints: the journal's id, a checkpoint signed on request and by the signer
//! thread, a witness's cosignature kept, and checkpoints that do not state this journal refused.

mod common;

use std::sync::Arc;
use std::time::Duration;

use journal_engine::{CheckpointPolicy, Error, Journal, Options};
use journal_format::checkpoint::{Checkpoint, SignedCheckpoint, SigningKey};
use journal_format::merkle::TreeHash;

use common::{append, event, small_segments};

fn key(name: &str, seed: u8) -> SigningKey {
    SigningKey::from_seed(name, [seed; 32]).unwrap()
}

fn fill(journal: &Journal, from: u64, n: u64) {
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(25) {
        append(journal, chunk.iter().map(|i| event(*i, "s1")).collect());
    }
}

#[test]
fn a_checkpoint_signed_on_request_states_the_tree_head_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let id = journal.id().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    fill(&journal, 0, 120);
    let (log_key, witness) = (key("journal-log", 1), key("witness", 2));
    let signed = journal.sign_checkpoint(&log_key).unwrap();
    let head = journal.tree_head().unwrap();
    assert_eq!(signed.checkpoint.origin, Checkpoint::origin_for(&id));
    assert_eq!(signed.checkpoint.tree_size, 120);
    assert_eq!(signed.checkpoint.root, head.root);
    assert_eq!(signed.checkpoint.chain_hash, head.hash);
    assert_eq!(
        signed.verify(&[log_key.verifier()]).unwrap(),
        ["journal-log"]
    );
    // Signing the same tree head with a second key adds its signature to the kept note.
    let cosigned = journal.sign_checkpoint(&witness).unwrap();
    assert_eq!(cosigned.checkpoint, signed.checkpoint);
    assert_eq!(cosigned.signatures.len(), 2);
    assert_eq!(cosigned.verify(&[witness.verifier()]).unwrap(), ["witness"]);
    fill(&journal, 120, 30);
    journal.sign_checkpoint(&log_key).unwrap();
    assert_eq!(journal.checkpoint_sizes().unwrap(), [120, 150]);
    assert_eq!(
        journal
            .latest_checkpoint()
            .unwrap()
            .unwrap()
            .checkpoint
            .tree_size,
        150
    );
    let covering = journal
        .checkpoint_covering(journal_format::Position(121))
        .unwrap();
    assert_eq!(covering.unwrap().checkpoint.tree_size, 150);
    journal.close();
    // The id and the checkpoints outlive the process, read-only too.
    let read_only = Journal::open(
        dir.path(),
        Options {
            read_only: true,
            ..small_segments()
        },
    )
    .unwrap();
    assert_eq!(read_only.id().unwrap(), id);
    assert_eq!(read_only.checkpoint(120).unwrap().unwrap(), cosigned);
    assert!(matches!(
        read_only.sign_checkpoint(&log_key),
        Err(Error::ReadOnly)
    ));
}

#[test]
fn a_witness_cosignature_is_kept_and_a_checkpoint_of_another_history_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    fill(&journal, 0, 60);
    let signed = journal.sign_checkpoint(&key("log", 3)).unwrap();
    // The witness cosigns the text it was given, elsewhere, and hands it back.
    let mut from_witness = SignedCheckpoint::parse(&signed.to_text()).unwrap();
    from_witness.signatures.clear();
    from_witness.cosign(&key("witness", 4)).unwrap();
    journal.keep_checkpoint(&from_witness).unwrap();
    let kept = journal.checkpoint(60).unwrap().unwrap();
    assert_eq!(kept.signatures.len(), 2, "both signatures, once each");
    assert!(kept.verify(&[key("log", 3).verifier()]).is_ok());
    assert!(kept.verify(&[key("witness", 4).verifier()]).is_ok());

    let refused = |change: &dyn Fn(&mut Checkpoint), says: &str| {
        let mut bad = signed.clone();
        change(&mut bad.checkpoint);
        let e = journal.keep_checkpoint(&bad).unwrap_err();
        assert!(
            matches!(e, Error::InvalidInput(_)) && e.to_string().contains(says),
            "{e}"
        );
    };
    refused(&|c| c.root = TreeHash([7; 32]), "root");
    refused(&|c| c.origin = Checkpoint::origin_for("another"), "is of");
    refused(&|c| c.tree_size = 61, "names 61 events");
    refused(
        &|c| c.chain_hash = journal_format::ChainHash([1; 32]),
        "chain link",
    );
}

#[test]
fn the_signer_thread_signs_every_so_many_events_and_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Arc::new(key("auto", 5));
    let options = Options {
        checkpoints: Some(CheckpointPolicy {
            key: Arc::clone(&signer),
            every_events: 100,
            every: Duration::from_secs(3600),
        }),
        ..small_segments()
    };
    let journal = Journal::open(dir.path(), options).unwrap();
    fill(&journal, 0, 250);
    // The signer looks every 100 ms; 20 s is far more than it needs.
    let mut waits = 0;
    while journal.checkpoint_sizes().unwrap().is_empty() {
        waits += 1;
        assert!(waits < 1000, "no checkpoint signed");
        std::thread::sleep(Duration::from_millis(20));
    }
    fill(&journal, 250, 7);
    journal.close();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let sizes = journal.checkpoint_sizes().unwrap();
    assert!(sizes.first().is_some_and(|s| *s >= 100), "{sizes:?}");
    assert_eq!(sizes.last(), Some(&257), "the last at close: {sizes:?}");
    for size in sizes {
        let kept = journal.checkpoint(size).unwrap().unwrap();
        kept.verify(&[signer.verifier()]).unwrap();
        assert_eq!(kept.checkpoint.root, journal.tree_root(size).unwrap());
    }
}
