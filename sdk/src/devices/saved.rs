//! How a checkpoint names a device ([`SavedDevice`]): what the manager
//! keeps of a device that vanished, and what the reconcile saves and reads
//! back. Apart from both so that neither names the other's types both ways.

use serde::{Deserialize, Serialize};

/// A device as a checkpoint names it: its id and identities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SavedForm", into = "SavedForm")]
pub(super) struct SavedDevice {
    pub(super) id: String,
    pub(super) identity: Vec<String>,
}

/// The JSON form of a [`SavedDevice`]: the id alone when the device has no
/// identity (the form of SDK 0.2), else an object.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum SavedForm {
    Id(String),
    Known {
        id: String,
        #[serde(default)]
        identity: Vec<String>,
    },
}

impl From<SavedForm> for SavedDevice {
    fn from(f: SavedForm) -> Self {
        match f {
            SavedForm::Id(id) => SavedDevice {
                id,
                identity: Vec::new(),
            },
            SavedForm::Known { id, identity } => SavedDevice { id, identity },
        }
    }
}

impl From<SavedDevice> for SavedForm {
    fn from(d: SavedDevice) -> Self {
        if d.identity.is_empty() {
            SavedForm::Id(d.id)
        } else {
            SavedForm::Known {
                id: d.id,
                identity: d.identity,
            }
        }
    }
}
