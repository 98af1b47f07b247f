//! A container image built locally from Debian's busybox-static: one layer
//! with `/bin/busybox` and the applet links the tests use, written as a
//! docker-archive tarball (`manifest.json`, the image config, the layer)
//! that `ctr images import` reads. No registry is involved.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::HarnessError;

/// The image's reference once imported.
pub const IMAGE: &str = "localhost/topomgr-test-busybox:1";

/// Applets linked to `/bin/busybox`.
pub(crate) const APPLETS: [&str; 8] = ["sh", "cat", "sleep", "grep", "true", "ls", "echo", "nproc"];

/// Writes the image tarball of `busybox` (a static binary) to `out`.
pub fn write_docker_archive(busybox: &Path, out: &Path) -> Result<(), HarnessError> {
    let layer = layer(busybox)?;
    let diff_id = sha256_digest(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/bin"],
            "Cmd": ["sleep", "1000000"],
        },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
    })
    .to_string();
    let manifest = serde_json::json!([{
        "Config": "config.json",
        "RepoTags": [IMAGE],
        "Layers": ["layer.tar"],
    }])
    .to_string();

    let file = File::create(out).map_err(|e| HarnessError::io("create", out, e))?;
    let mut archive = tar::Builder::new(file);
    for (name, data) in [
        ("manifest.json", manifest.as_bytes()),
        ("config.json", config.as_bytes()),
        ("layer.tar", layer.as_slice()),
    ] {
        append(&mut archive, name, 0o644, data)?;
    }
    archive
        .into_inner()
        .and_then(|mut f| f.flush())
        .map_err(|e| HarnessError::io("write", out, e))
}

/// `sha256:<hex>` of `data`, as image configs name layers.
fn sha256_digest(data: &[u8]) -> String {
    let hex: String = Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The image's only layer.
fn layer(busybox: &Path) -> Result<Vec<u8>, HarnessError> {
    let binary = std::fs::read(busybox).map_err(|e| HarnessError::io("read", busybox, e))?;
    let mut archive = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    dir.set_cksum();
    archive
        .append_data(&mut dir, "bin/", std::io::empty())
        .map_err(|e| HarnessError::new(format!("building the image layer: {e}")))?;
    append(&mut archive, "bin/busybox", 0o755, &binary)?;
    for applet in APPLETS {
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_mode(0o777);
        link.set_size(0);
        archive
            .append_link(&mut link, format!("bin/{applet}"), "busybox")
            .map_err(|e| HarnessError::new(format!("building the image layer: {e}")))?;
    }
    archive
        .into_inner()
        .map_err(|e| HarnessError::new(format!("building the image layer: {e}")))
}

fn append<W: Write>(
    archive: &mut tar::Builder<W>,
    name: &str,
    mode: u32,
    data: &[u8],
) -> Result<(), HarnessError> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(data.len() as u64);
    header.set_cksum();
    archive
        .append_data(&mut header, name, data)
        .map_err(|e| HarnessError::new(format!("adding {name} to the image tarball: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_the_layer_by_its_digest() {
        let dir = std::env::temp_dir().join(format!("topomgr-image-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("busybox");
        std::fs::write(&fake, b"\x7fELF not really").unwrap();
        let out = dir.join("image.tar");
        write_docker_archive(&fake, &out).unwrap();

        let mut entries = std::collections::BTreeMap::new();
        let mut a = tar::Archive::new(File::open(&out).unwrap());
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            entries.insert(name, data);
        }
        assert_eq!(
            entries.keys().collect::<Vec<_>>(),
            ["config.json", "layer.tar", "manifest.json"]
        );
        let config: serde_json::Value = serde_json::from_slice(&entries["config.json"]).unwrap();
        let digest = sha256_digest(&entries["layer.tar"]);
        assert_eq!(config["rootfs"]["diff_ids"][0], digest.as_str());
        let mut layer = tar::Archive::new(entries["layer.tar"].as_slice());
        let names: Vec<String> = layer
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"bin/busybox".to_owned()));
        assert!(names.contains(&"bin/sh".to_owned()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
