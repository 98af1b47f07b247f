//! `topology_file`: a machine's GPUs and links from a file, either a
//! captured `nvidia-smi topo -m` output ([`smi`]) or the JSON description
//! ([`json`]); a file whose first non-blank character is `{` is JSON.
//!
//! Every error names the file and the line, column or JSON field at fault.

pub mod json;
pub mod smi;

use std::path::{Path, PathBuf};

use crate::topology::GpuTopology;

/// A topology file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TopologyFileError {
    /// The file cannot be read.
    #[error("cannot read topology file {}: {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The file's content is wrong.
    #[error("topology file {}, {location}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// `line 4`, `line 4, column GPU3`, `gpus[2].id`, `links[5]`, ...
        location: String,
        /// What is wrong.
        message: String,
    },
}

/// Where in a file, and what is wrong: parsers return this; [`parse`] adds
/// the file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// `line 4`, `gpus[2].id`, ...
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl ParseError {
    /// An error at `location`.
    pub fn new(location: impl Into<String>, message: impl Into<String>) -> Self {
        ParseError {
            location: location.into(),
            message: message.into(),
        }
    }
}

/// Reads and parses the topology file at `path`.
pub fn load(path: &Path) -> Result<GpuTopology, TopologyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyFileError::Read {
        path: path.to_owned(),
        cause: source,
    })?;
    parse(&text).map_err(|e| TopologyFileError::Invalid {
        path: path.to_owned(),
        location: e.location,
        message: e.message,
    })
}

/// Parses a topology file's text: JSON when it starts with `{`, else an
/// `nvidia-smi topo -m` capture.
pub fn parse(text: &str) -> Result<GpuTopology, ParseError> {
    if text.trim_start().starts_with('{') {
        json::parse(text)
    } else {
        smi::parse(text)
    }
}

/// A PCI address as sysfs writes it, from the forms NVML and people write
/// (the SDK's, which device identities use).
pub use topomgr_sdk::devices::normalize_pci_address;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_files_are_named() {
        let err = load(Path::new("/nonexistent/topo.json")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read topology file /nonexistent/topo.json: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn content_errors_name_the_file_and_place() {
        let dir = std::env::temp_dir().join(format!("gpu-topofile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.json");
        std::fs::write(
            &file,
            r#"{"gpus": [{"index": 0, "id": "a", "numa": "x"}], "links": []}"#,
        )
        .unwrap();
        let err = load(&file).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "topology file {}, gpus[0].numa: invalid type: string \"x\", expected i64 at line 1 column 45",
                file.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
