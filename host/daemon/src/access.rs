//! Who may talk to the daemon: the socket's ownership and mode, and a check
//! of the peer's credentials (`SO_PEERCRED`) on every connection.
//!
//! The socket is created with mode `0660`, owned by root and the configured
//! group (when that group does not exist, ownership is left as it is and a
//! warning is logged). Independently of file permissions, every connection's
//! peer must be root, have the group as its primary group, or have it among
//! its supplementary groups (read from `/proc/<pid>/status`); otherwise each
//! request is answered `403` and the refusal is logged with the peer's
//! uid, gid and pid.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tracing::warn;

/// Mode of the daemon's socket.
pub(crate) const SOCKET_MODE: u32 = 0o660;

/// The credentials of a connected peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Process id, when the kernel reports one.
    pub pid: Option<i32>,
}

/// Who may connect: root, and members of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccessPolicy {
    /// The group's name (for messages).
    pub group: String,
    /// Its id, `None` when the group does not exist (root only).
    pub gid: Option<u32>,
}

impl AccessPolicy {
    /// Root plus the members of `group` (looked up in the group database).
    pub(crate) fn for_group(group: &str) -> AccessPolicy {
        let gid = match nix::unistd::Group::from_name(group) {
            Ok(Some(g)) => Some(g.gid.as_raw()),
            Ok(None) => None,
            Err(e) => {
                warn!(group, error = %e, "cannot look up the socket group; only root may connect");
                None
            }
        };
        AccessPolicy {
            group: group.to_owned(),
            gid,
        }
    }

    /// Whether `peer` may use the daemon; `supplementary` are its extra groups.
    pub(crate) fn allows(&self, peer: &Peer, supplementary: &[u32]) -> bool {
        peer.uid == 0
            || self
                .gid
                .is_some_and(|g| peer.gid == g || supplementary.contains(&g))
    }

    /// [`AccessPolicy::allows`], reading the supplementary groups of the
    /// peer's process; logs a refusal.
    pub(crate) fn check(&self, peer: &Peer) -> bool {
        let groups = match (peer.uid, self.gid, peer.pid) {
            (0, _, _) | (_, None, _) | (_, _, None) => Vec::new(),
            (_, Some(_), Some(pid)) => supplementary_groups(pid),
        };
        let ok = self.allows(peer, &groups);
        if !ok {
            warn!(uid = peer.uid, gid = peer.gid, pid = ?peer.pid, group = %self.group, "connection refused: peer is neither root nor in the socket group");
        }
        ok
    }
}

/// The supplementary groups of process `pid` (`Groups:` of `/proc/PID/status`);
/// empty when unreadable.
pub(crate) fn supplementary_groups(pid: i32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_groups_line(&s))
        .unwrap_or_default()
}

fn parse_groups_line(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
    )
}

/// Errors preparing the socket path.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another daemon answers on the socket.
    #[error("{}: another topomgr daemon is already serving this socket; stop it or use --socket with another path", path.display())]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// Something that is not a socket is in the way.
    #[error("{}: exists and is not a socket; refusing to remove it (move it away or choose another --socket)", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// An IO error on the socket path.
    #[error("cannot {op} {}: {cause}", path.display())]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
}

/// Make `path` ready for `bind`: create its directory, remove a stale socket
/// left by a dead daemon, refuse a live one or a non-socket.
pub(crate) fn prepare_socket_path(path: &Path) -> Result<(), SocketError> {
    let io = |op: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| SocketError::Io {
            op,
            path,
            cause: source,
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io("create directory", dir))?;
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse {
                    path: path.to_path_buf(),
                });
            }
            fs::remove_file(path).map_err(io("remove stale socket", path))?;
            Ok(())
        }
        Ok(_) => Err(SocketError::NotASocket {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("inspect", path)(e)),
    }
}

/// Give the bound socket its mode (0660) and owner (root, the group).
pub(crate) fn secure_socket(path: &Path, policy: &AccessPolicy) -> Result<(), SocketError> {
    fs::set_permissions(path, fs::Permissions::from_mode(SOCKET_MODE)).map_err(|source| {
        SocketError::Io {
            op: "set the mode of",
            path: path.to_path_buf(),
            cause: source,
        }
    })?;
    match policy.gid {
        Some(gid) => std::os::unix::fs::chown(path, Some(0), Some(gid)).map_err(|source| {
            SocketError::Io {
                op: "change the owner of",
                path: path.to_path_buf(),
                cause: source,
            }
        })?,
        None => {
            warn!(group = %policy.group, socket = %path.display(), "the socket group does not exist; only root may connect (create the group or set [daemon] group)")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            uid,
            gid,
            pid: None,
        }
    }

    #[test]
    fn root_primary_or_supplementary_group_members_only() {
        let p = AccessPolicy {
            group: "topomgr".to_owned(),
            gid: Some(990),
        };
        assert!(p.allows(&peer(0, 0), &[]));
        assert!(p.allows(&peer(1000, 990), &[]));
        assert!(p.allows(&peer(1000, 1000), &[27, 990]));
        assert!(!p.allows(&peer(1000, 1000), &[27]));
        let none = AccessPolicy {
            group: "nogroup-here".to_owned(),
            gid: None,
        };
        assert!(none.allows(&peer(0, 5), &[]));
        assert!(!none.allows(&peer(1000, 990), &[990]));
        assert!(!none.check(&peer(1000, 990)));
    }

    #[test]
    fn groups_line_of_proc_status() {
        let status =
            "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 990 \nVmPeak:\t1 kB\n";
        assert_eq!(parse_groups_line(status), Some(vec![4, 24, 27, 990]));
        assert_eq!(parse_groups_line("Groups:\n"), Some(vec![]));
        assert_eq!(parse_groups_line("Name: x\n"), None);
        assert!(supplementary_groups(std::process::id() as i32).len() < 65_536);
    }

    #[test]
    fn stale_socket_removed_live_one_and_files_refused() {
        let dir = std::env::temp_dir().join(format!("topomgr-access-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let sock = dir.join("run/t.sock");
        prepare_socket_path(&sock).unwrap();
        let live = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(
            prepare_socket_path(&sock).unwrap_err().to_string(),
            format!("{}: another topomgr daemon is already serving this socket; stop it or use --socket with another path", sock.display())
        );
        drop(live);
        prepare_socket_path(&sock).unwrap();
        assert!(!sock.exists());
        fs::write(&sock, "x").unwrap();
        assert_eq!(
            prepare_socket_path(&sock).unwrap_err().to_string(),
            format!("{}: exists and is not a socket; refusing to remove it (move it away or choose another --socket)", sock.display())
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
