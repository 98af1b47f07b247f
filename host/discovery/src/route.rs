//! The IPv4 routing table beside the sysfs tree: which network interfaces
//! carry the host's default route.
//!
//! The table is `proc/net/route` in the directory that holds the sysfs root
//! (`<sysfs_root>/../proc/net/route`): for the live `/sys` that is
//! `/proc/net/route`; a recorded tree keeps its `proc/` beside its `sys/`
//! (`examples/machines/2s2n-sriov/proc/net/route`). The parent is taken
//! from the path as written (`/sys` and `/sys/` give `/`), and `..` is used
//! only when the root has no last component to drop (`.`).
//!
//! A default route is a line whose `Destination` and `Mask` are both
//! `00000000` (the netlink route without a destination that the SR-IOV
//! network device plugin looks for). No table (recorded trees without
//! `proc/`) means no interface carries one.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use super::sysfs::{open_regular, parse_error, read_error};
use super::DiscoveryError;

/// The longest line accepted (the kernel pads its lines to 127 characters).
const MAX_LINE_BYTES: usize = 4096;

/// Where the routing table of the machine whose sysfs is `sysfs_root` is.
pub(super) fn route_path(sysfs_root: &Path) -> PathBuf {
    let parent = match sysfs_root.components().next_back() {
        Some(Component::Normal(_)) => sysfs_root.parent(),
        _ => None,
    };
    match parent {
        Some(parent) => parent.join("proc/net/route"),
        None => sysfs_root.join("../proc/net/route"),
    }
}

/// The interfaces with an IPv4 default route, read from `path`; empty when
/// the file does not exist.
pub(super) fn default_route_interfaces(path: &Path) -> Result<BTreeSet<String>, DiscoveryError> {
    let file = match open_regular(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(path = %path.display(), "no routing table; no interface carries a default route");
            return Ok(BTreeSet::new());
        }
        Err(e) => return Err(read_error(path, e)),
    };
    default_routes_in(path, BufReader::new(file))
}

/// The interfaces with a default route in the table `reader` reads (`path`
/// names it in errors).
fn default_routes_in(
    path: &Path,
    mut reader: impl BufRead,
) -> Result<BTreeSet<String>, DiscoveryError> {
    let mut out = BTreeSet::new();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| read_error(path, e))?;
        if read == 0 {
            break;
        }
        number += 1;
        if line.len() > MAX_LINE_BYTES {
            return Err(parse_error(
                path,
                "routing table lines of at most 4096 bytes",
                &String::from_utf8_lossy(&line),
            ));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| parse_error(path, "UTF-8 text", &String::from_utf8_lossy(&line)))?;
        let fields: Vec<&str> = text.split_whitespace().collect();
        if number == 1 {
            if fields.first() != Some(&"Iface") {
                return Err(parse_error(
                    path,
                    "the kernel's routing table, starting with its header line \"Iface Destination ...\"",
                    text,
                ));
            }
            continue;
        }
        if fields.is_empty() {
            continue;
        }
        let hex = |s: &&str| s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit());
        let (Some(iface), Some(destination), Some(mask)) =
            (fields.first(), fields.get(1), fields.get(7))
        else {
            return Err(parse_error(
                path,
                "route lines of at least 8 fields (Iface Destination Gateway Flags RefCnt Use Metric Mask ...)",
                text,
            ));
        };
        if !hex(destination) || !hex(mask) {
            return Err(parse_error(
                path,
                "route lines with 8-digit hex Destination and Mask fields",
                text,
            ));
        }
        if *destination == "00000000" && *mask == "00000000" {
            out.insert((*iface).to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_root_reads_proc_net_route() {
        for (root, table) in [
            ("/sys", "/proc/net/route"),
            ("/sys/", "/proc/net/route"),
            ("examples/m/sys", "examples/m/proc/net/route"),
            ("sys", "proc/net/route"),
            (".", "./../proc/net/route"),
            ("/", "/../proc/net/route"),
        ] {
            assert_eq!(route_path(Path::new(root)), Path::new(table), "{root}");
        }
    }

    fn table(tag: &str, text: &str) -> (PathBuf, Result<BTreeSet<String>, DiscoveryError>) {
        let dir = std::env::temp_dir().join(format!("topomgr-route-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("route");
        std::fs::write(&path, text).unwrap();
        let got = default_route_interfaces(&path);
        let _ = std::fs::remove_dir_all(&dir);
        (path, got)
    }

    const HEADER: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

    #[test]
    fn default_routes_are_destination_and_mask_zero() {
        let text = format!(
            "{HEADER}eno1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0   \n\
             eno1\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
             ens1f0v0\t00000000\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n\
             \n\
             wg0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n"
        );
        let (_, got) = table("ok", &text);
        let got: Vec<String> = got.unwrap().into_iter().collect();
        assert_eq!(got, ["eno1", "wg0"]);
        let (_, empty) = table("header-only", HEADER);
        assert!(empty.unwrap().is_empty());
        assert!(
            default_route_interfaces(Path::new("/nonexistent/proc/net/route"))
                .unwrap()
                .is_empty()
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_a_set_or_an_error_naming_the_file(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            lines in proptest::collection::vec("[ -~\t]{0,80}", 0..8),
        ) {
            let path = Path::new("/x/proc/net/route");
            for input in [bytes, format!("{HEADER}{}", lines.join("\n")).into_bytes()] {
                if let Err(e) = default_routes_in(path, &input[..]) {
                    proptest::prop_assert!(e.to_string().starts_with("/x/proc/net/route: "), "{}", e);
                }
            }
        }
    }

    #[test]
    fn malformed_tables_name_the_file() {
        for (tag, text, expected) in [
            ("no-header", "eno1 00000000\n".to_owned(), "header line"),
            (
                "short",
                format!("{HEADER}eno1 00000000 0\n"),
                "at least 8 fields",
            ),
            (
                "not-hex",
                format!("{HEADER}eno1 default 0 3 0 0 0 00000000\n"),
                "8-digit hex",
            ),
            (
                "long",
                format!("{HEADER}{}\n", "x".repeat(5000)),
                "at most 4096 bytes",
            ),
        ] {
            let (path, got) = table(tag, &text);
            let e = got.expect_err(tag).to_string();
            assert!(
                e.starts_with(&format!("{}: expected", path.display())),
                "{e}"
            );
            assert!(e.contains(expected), "{tag}: {e}");
        }
    }
}
