//! What `verify` is asked and what it answers: its options, the problems it finds (each with
//! its place) and its report.

use journal_format::merkle::TreeHash;
use journal_format::{ChainHash, Position, SegmentId};
use serde::Serialize;

/// What `verify` checks beyond the log itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyOptions {
    /// A position and chain link kept outside the journal; the journal must hold that exact
    /// link at that position.
    pub digest: Option<(Position, ChainHash)>,
    /// The Merkle tree's root at the digest's position, when the digest names one (`journal
    /// digest` gives it); the tree the log gives must have that root.
    pub digest_root: Option<TreeHash>,
    /// Check the index against the log.
    pub check_index: bool,
    /// Check the stored Merkle tree against the log.
    pub check_tree: bool,
    /// Check referenced blobs (and every stored blob) against their hashes.
    pub check_blobs: bool,
}

impl Default for VerifyOptions {
    fn default() -> VerifyOptions {
        VerifyOptions {
            digest: None,
            digest_root: None,
            check_index: true,
            check_tree: true,
            check_blobs: true,
        }
    }
}

/// One problem found, with its place.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// What kind of problem: `segment_header`, `frame`, `truncated`, `position_sequence`, `chain`,
    /// `unfinished_batch`, `footer`, `decode`, `index_missing`, `index_extra`,
    /// `unexpected_segment`, `blob_missing`, `blob_mismatch`, `digest_mismatch`,
    /// `digest_beyond_head`, `digest_archived`, `archive_missing`, `archive_mismatch`.
    pub kind: &'static str,
    /// The segment file, when the problem is in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// The byte offset in that segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The position concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

/// The head of the journal as `verify` reports it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportHead {
    /// The head position.
    pub position: u64,
    /// The head's chain link, hex.
    pub hash: String,
}

/// The result of `verify`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct VerifyReport {
    /// Whether no problem was found.
    pub ok: bool,
    /// How many events were checked.
    pub events: u64,
    /// How many segments were checked.
    pub segments: usize,
    /// The head that was checked up to.
    pub head: ReportHead,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// What was archived and how it was checked; absent when nothing is archived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveCheck>,
}

/// How `verify` treated the archived segments.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ArchiveCheck {
    /// How many segments the manifest lists.
    pub segments: usize,
    /// The last archived position.
    pub last_archived: u64,
    /// Whether the archive was attached: its files hashed against the manifest and walked
    /// with the live log, from position 1.
    pub attached: bool,
    /// The first position the walk checked: 1 when attached, else the one after the boundary.
    pub verified_from: u64,
    /// What was and was not checked, in words.
    pub note: String,
}

/// The problems found so far, in the order they were found.
#[derive(Debug, Default)]
pub(super) struct Problems {
    pub list: Vec<Problem>,
}

impl Problems {
    /// Records one problem at its place.
    pub fn problem(
        &mut self,
        kind: &'static str,
        segment: Option<SegmentId>,
        offset: Option<u64>,
        position: Option<Position>,
        detail: String,
    ) {
        self.list.push(Problem {
            kind,
            segment: segment.map(SegmentId::file_name),
            offset,
            position: position.map(|p| p.0),
            detail,
        });
    }
}
