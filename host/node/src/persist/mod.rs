//! Persistence: the state directory and the formats of its files.
//!
//! Owns the snapshot ([`snapshot`]) and the journal ([`journal`]) with
//! their envelopes, how far the journal was acknowledged ([`ack`]), the store that pairs them ([`store`]), the node state
//! as a snapshot body and its restore ([`image`]), the one-shot commands'
//! use of a state directory ([`state_dir`]), the operator's `state check`
//! and `state recover` ([`state_repair`]) and the record schema below.
//!
//! May not touch: cgroups, or the node state's fields (it reads and
//! installs a state through [`crate::state::NodeState`]'s methods); it
//! takes the state directory's lock through [`crate::locks`].
//!
//! # The record schema
//!
//! What a state directory's files hold, as types persistence owns.
//!
//! The snapshot body and the journal records are written and read as the
//! record schema's own serde types (`v1`), never as the engine's,
//! the SDK's or the API's: renaming a field of [`topomgr_engine`]'s
//! `AdmitResult` or of a pod type changes nothing on disk. The types the
//! node works with are converted to and from the schema at one seam
//! (`seam`: every `From`/`TryFrom`); the envelopes around the JSON (the
//! snapshot's header and checksum, the journal's frames) belong to the
//! `snapshot` and `journal` modules, which call this one.
//!
//! | schema | written in | read in |
//! |---|---|---|
//! | `v1` | state version 4, journal version 2 | state versions 1-4, journal versions 1-2 |
//!
//! Golden fixtures pin both directions: `tests/fixtures/state/v3` (written by
//! main at 0af6219) and `v4` (with its acknowledgements, [`ack`]) open with
//! today's code, and the bytes written for a fixed state are compared with a
//! committed file (`tests` below).

pub mod ack;
pub mod image;
pub mod journal;
pub mod snapshot;
pub mod state_dir;
pub mod state_repair;
pub mod store;
pub(crate) mod v1;

mod seam;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use topomgr_engine::admission::AdmitResult;

use crate::api::Attachments;
use crate::state::pod_owner::Owner;
use crate::state::provider_states::PendingReleases;
use crate::state::Change;

pub(crate) use seam::FormatError;

/// What a snapshot holds (and what recovery rebuilds from the snapshot and
/// the journal before it is installed).
///
/// Written and read as [`v1::StateBody`], converted at the one
/// seam (`seam`).
#[derive(Debug, Default, Clone)]
pub(crate) struct Body {
    pub(crate) pods: BTreeMap<String, AdmitResult>,
    /// Provider name -> hex of its checkpoint bytes.
    pub(crate) providers: BTreeMap<String, String>,
    pub(crate) attachments: Attachments,
    pub(crate) owners: BTreeMap<String, Owner>,
    pub(crate) pending_releases: BTreeMap<String, PendingReleases>,
    /// The journal generation that continues this snapshot.
    pub(crate) generation: u64,
}

/// One journal record: everything one commit changed. Written and read as
/// [`v1::JournalRecord`], converted at the one seam
/// (`seam`). Read and applied by the store.
#[derive(Debug, Default)]
pub(crate) struct Record {
    /// 1 for the first record of a generation, then +1.
    pub(crate) seq: u64,
    pub(crate) changes: Vec<Change>,
    /// Changed providers: name -> hex of their checkpoint bytes.
    pub(crate) providers: BTreeMap<String, String>,
    /// Changed held or absent providers: the releases they have not seen.
    pub(crate) pending_releases: BTreeMap<String, PendingReleases>,
}

/// Why stored JSON could not be read into the node's types.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// It does not parse as the schema.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// It parses, but holds a value the node refuses.
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// The JSON of a snapshot body.
pub(crate) fn body_to_json(body: &Body) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&v1::StateBody::from(body))
}

/// A snapshot body read from its JSON.
pub(crate) fn body_from_json(bytes: &[u8]) -> Result<Body, ReadError> {
    let body: v1::StateBody = serde_json::from_slice(bytes)?;
    Ok(Body::try_from(body)?)
}

/// A snapshot body as a JSON value, as it is written.
pub(crate) fn body_to_value(body: &Body) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(v1::StateBody::from(body))
}

/// The JSON payload of a journal record.
pub(crate) fn record_to_json(record: &Record) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&v1::JournalRecord::from(record))
}

/// A journal record read from its payload.
pub(crate) fn record_from_json(bytes: &[u8]) -> Result<Record, ReadError> {
    let record: v1::JournalRecord = serde_json::from_slice(bytes)?;
    Ok(Record::try_from(record)?)
}
