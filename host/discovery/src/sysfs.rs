//! Small readers for sysfs attribute files: every error names the path and
//! quotes what was found.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use topomgr_sdk::CpuSet;

use super::DiscoveryError;

/// Longest excerpt of a file quoted in an error message.
const MAX_FOUND_CHARS: usize = 80;

/// `text` without surrounding whitespace and NUL bytes (recorded trees
/// sometimes keep the NUL padding of the buffer they were read into).
pub(super) fn clean(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || c == '\0')
}

/// Build a [`DiscoveryError::Parse`] quoting `text` (trimmed, shortened).
pub(super) fn parse_error(path: &Path, expected: &'static str, text: &str) -> DiscoveryError {
    let trimmed = clean(text);
    let found = if trimmed.chars().count() > MAX_FOUND_CHARS {
        let mut s: String = trimmed.chars().take(MAX_FOUND_CHARS).collect();
        s.push_str("...");
        s
    } else {
        trimmed.to_string()
    };
    DiscoveryError::Parse {
        path: path.to_path_buf(),
        expected,
        found,
    }
}

pub(super) fn read_error(path: &Path, source: io::Error) -> DiscoveryError {
    DiscoveryError::Read {
        path: path.to_path_buf(),
        cause: source,
    }
}

fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, DiscoveryError> {
    String::from_utf8(bytes)
        .map_err(|e| parse_error(path, "UTF-8 text", &String::from_utf8_lossy(e.as_bytes())))
}

/// Read a file that may be absent: `Ok(None)` when it does not exist, an
/// error when it exists but cannot be read or is not UTF-8.
pub(super) fn read_optional(path: &Path) -> Result<Option<String>, DiscoveryError> {
    match read_small(path) {
        Ok(bytes) => utf8(path, bytes).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(read_error(path, e)),
    }
}

/// The largest attribute file read (the kernel's own are at most a page;
/// recorded trees keep them as they were).
pub(super) const MAX_ATTRIBUTE_BYTES: u64 = 1 << 20;

/// Open `path` for reading, refusing anything but a regular file.
///
/// The file is opened without blocking (a FIFO in a recorded tree would
/// otherwise wait for a writer forever) and refused unless `fstat` says it
/// is a regular file, so `/dev/zero`, `/dev/urandom`, FIFOs, sockets and
/// directories are errors, not hangs.
pub(super) fn open_regular(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {what}; sysfs attributes are regular files"),
        ));
    }
    Ok(file)
}

/// Read a whole (small) attribute file, which must be a regular file
/// ([`open_regular`]); at most [`MAX_ATTRIBUTE_BYTES`] are read. The size
/// is not used to size the buffer: sysfs reports 4096 for every attribute.
fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::with_capacity(64);
    file.take(MAX_ATTRIBUTE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_ATTRIBUTE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {MAX_ATTRIBUTE_BYTES} bytes; sysfs attributes are small"),
        ));
    }
    Ok(bytes)
}

/// Read a mandatory file.
pub(super) fn read_mandatory(path: &Path) -> Result<String, DiscoveryError> {
    match read_small(path) {
        Ok(bytes) => utf8(path, bytes),
        Err(e) => Err(read_error(path, e)),
    }
}

/// Parse a whole file as one number (decimal, surrounding whitespace ignored).
pub(super) fn parse_num<T: FromStr>(
    path: &Path,
    text: &str,
    expected: &'static str,
) -> Result<T, DiscoveryError> {
    clean(text)
        .parse()
        .map_err(|_| parse_error(path, expected, text))
}

/// Read an optional file holding one number.
pub(super) fn read_optional_num<T: FromStr>(
    path: &Path,
    expected: &'static str,
) -> Result<Option<T>, DiscoveryError> {
    read_optional(path)?
        .map(|text| parse_num(path, &text, expected))
        .transpose()
}

/// Parse a Linux list (`0-3,8-11`; empty = empty set).
pub(super) fn parse_cpu_list(path: &Path, text: &str) -> Result<CpuSet, DiscoveryError> {
    CpuSet::parse(clean(text)).map_err(|_| parse_error(path, "a CPU list like 0-3,8-11", text))
}

/// Parse a kernel hex CPU mask: comma-separated 32-bit words, most
/// significant first (`00000000,0000ffff`).
pub(super) fn parse_cpu_mask(path: &Path, text: &str) -> Result<CpuSet, DiscoveryError> {
    let bad = || parse_error(path, "a hex CPU mask like 00000000,0000ffff", text);
    let trimmed = clean(text);
    let mut set = CpuSet::new();
    if trimmed.is_empty() {
        return Ok(set);
    }
    for (word_index, word) in trimmed.rsplit(',').enumerate() {
        if word.is_empty() || word.len() > 8 {
            return Err(bad());
        }
        let bits = u32::from_str_radix(word, 16).map_err(|_| bad())?;
        let base = u32::try_from(word_index)
            .ok()
            .and_then(|w| w.checked_mul(32))
            .filter(|b| *b <= topomgr_sdk::MAX_CPU_ID)
            .ok_or_else(bad)?;
        for bit in 0..32 {
            if bits & (1 << bit) != 0 {
                set.insert(base + bit);
            }
        }
    }
    Ok(set)
}

/// Read a CPU set from the first existing of a list file and a mask file in
/// `dir` (`cpulist` / `cpumap`, `thread_siblings_list` / `thread_siblings`).
pub(super) fn read_cpus(
    dir: &Path,
    list_name: &str,
    mask_name: &str,
) -> Result<Option<CpuSet>, DiscoveryError> {
    let list_path = dir.join(list_name);
    if let Some(text) = read_optional(&list_path)? {
        return parse_cpu_list(&list_path, &text).map(Some);
    }
    let mask_path = dir.join(mask_name);
    match read_optional(&mask_path)? {
        Some(text) => parse_cpu_mask(&mask_path, &text).map(Some),
        None => Ok(None),
    }
}

/// The entries `<prefix><number>` of `dir`, sorted by number. `Ok(None)` when
/// `dir` does not exist. Other names are ignored.
pub(super) fn numbered_entries(
    dir: &Path,
    prefix: &str,
) -> Result<Option<Vec<(u32, PathBuf)>>, DiscoveryError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| read_error(dir, e))?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        match number.parse::<u32>() {
            Ok(n) => out.push((n, entry.path())),
            Err(_) => {
                return Err(parse_error(
                    &entry.path(),
                    "a number that fits in 32 bits",
                    number,
                ))
            }
        }
    }
    out.sort_by_key(|(n, _)| *n);
    Ok(Some(out))
}

/// The names in a directory, sorted; `Ok(None)` when it does not exist.
pub(super) fn dir_names(dir: &Path) -> Result<Option<Vec<String>>, DiscoveryError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| read_error(dir, e))?;
        let name = entry.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| parse_error(&entry.path(), "a UTF-8 name", &name.to_string_lossy()))?;
        out.push(name.to_string());
    }
    out.sort();
    Ok(Some(out))
}

/// The last component of a symlink's target (`driver -> ../../bus/pci/drivers/nvidia`
/// gives `nvidia`); `Ok(None)` when the link does not exist.
pub(super) fn link_name(path: &Path) -> Result<Option<String>, DiscoveryError> {
    let target = match fs::read_link(path) {
        Ok(target) => target,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(path, e)),
    };
    let shown = target.to_string_lossy().into_owned();
    target
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| Some(n.to_string()))
        .ok_or_else(|| parse_error(path, "a link to a named sysfs entry", &shown))
}

/// Parse the `<key>: <n> kB` line of a meminfo file (`Node 0 MemTotal: 8 kB`
/// or `MemTotal: 8 kB`) into bytes.
pub(super) fn meminfo_bytes(
    path: &Path,
    text: &str,
    key: &'static str,
) -> Result<u64, DiscoveryError> {
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        if !tokens.by_ref().any(|t| t == key) {
            continue;
        }
        let (Some(value), Some("kB"), None) = (tokens.next(), tokens.next(), tokens.next()) else {
            return Err(parse_error(
                path,
                "a meminfo line like \"MemTotal: 8 kB\"",
                line,
            ));
        };
        let kb: u64 = value
            .parse()
            .map_err(|_| parse_error(path, "a meminfo line like \"MemTotal: 8 kB\"", line))?;
        return kb
            .checked_mul(1024)
            .ok_or_else(|| DiscoveryError::TooLarge {
                path: path.to_path_buf(),
                what: key,
                value: format!("{kb} kB"),
            });
    }
    Err(DiscoveryError::Missing {
        path: path.to_path_buf(),
        what: meminfo_line_name(key),
    })
}

fn meminfo_line_name(key: &'static str) -> &'static str {
    match key {
        "MemTotal:" => "the MemTotal line",
        "MemFree:" => "the MemFree line",
        _ => "a meminfo line",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("/s/f")
    }

    #[test]
    fn hex_masks() {
        let set = parse_cpu_mask(p(), "00000000,0000ffff\n").expect("mask");
        assert_eq!(set.to_string(), "0-15");
        let set = parse_cpu_mask(p(), "1,00000101").expect("mask");
        assert_eq!(set.to_string(), "0,8,32");
        assert_eq!(
            parse_cpu_mask(p(), "0303\0\n").expect("mask").to_string(),
            "0-1,8-9"
        );
        assert!(parse_cpu_mask(p(), "").expect("empty").is_empty());
        assert_eq!(
            parse_cpu_mask(p(), "00000000,xyz")
                .expect_err("bad")
                .to_string(),
            "/s/f: expected a hex CPU mask like 00000000,0000ffff, found \"00000000,xyz\""
        );
        assert_eq!(
            parse_cpu_mask(p(), "000000000")
                .expect_err("word too long")
                .to_string(),
            "/s/f: expected a hex CPU mask like 00000000,0000ffff, found \"000000000\""
        );
    }

    #[test]
    fn meminfo_lines() {
        let text = "Node 3 MemTotal:  8 kB\nNode 3 MemFree:   2 kB\n";
        assert_eq!(meminfo_bytes(p(), text, "MemTotal:").expect("total"), 8192);
        assert_eq!(meminfo_bytes(p(), text, "MemFree:").expect("free"), 2048);
        assert_eq!(
            meminfo_bytes(p(), "Node 3 MemTotal: 8 MB\n", "MemTotal:")
                .expect_err("unit")
                .to_string(),
            "/s/f: expected a meminfo line like \"MemTotal: 8 kB\", found \"Node 3 MemTotal: 8 MB\""
        );
        assert_eq!(
            meminfo_bytes(p(), "MemTotal: 18446744073709551615 kB", "MemTotal:")
                .expect_err("overflow")
                .to_string(),
            "/s/f: MemTotal: 18446744073709551615 kB is too large"
        );
    }

    mod fuzz {
        //! Property tests: the parsers never panic, whatever the file holds.
        //! Each property runs 2,000 cases per `cargo test` (about a second
        //! in all); `PROPTEST_CASES` raises it.

        use super::*;
        use proptest::prelude::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 2_000,
                ..ProptestConfig::default()
            }
        }

        /// Text shaped like sysfs content: digits, separators, hex, units,
        /// NULs, and the odd non-ASCII character.
        fn sysfs_text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[0-9,\\- \n]{0,40}",
                "[0-9a-fA-Fx,\\x00\n]{0,80}",
                "(Node [0-9] )?(MemTotal|MemFree):? *[0-9 ]{0,25}(kB|MB)?\n?",
                any::<String>(),
            ]
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn cpu_lists_never_panic(text in sysfs_text()) {
                if let Ok(set) = parse_cpu_list(p(), &text) {
                    // What parses prints back as an equal list.
                    let again = parse_cpu_list(p(), &set.to_string()).expect("round trip");
                    prop_assert_eq!(again, set);
                }
            }

            #[test]
            fn cpu_masks_never_panic(text in sysfs_text()) {
                let _ = parse_cpu_mask(p(), &text);
            }

            #[test]
            fn cpu_masks_of_words_parse(words in proptest::collection::vec(any::<u32>(), 1..40)) {
                let text: Vec<String> = words.iter().map(|w| format!("{w:08x}")).collect();
                let set = parse_cpu_mask(p(), &text.join(",")).expect("valid mask");
                let expected: u32 = words.iter().map(|w| w.count_ones()).sum();
                prop_assert_eq!(set.len(), expected as usize);
            }

            #[test]
            fn meminfo_never_panics(text in sysfs_text()) {
                let _ = meminfo_bytes(p(), &text, "MemTotal:");
                let _ = meminfo_bytes(p(), &text, "MemFree:");
            }

            #[test]
            fn numbers_never_panic(text in sysfs_text()) {
                let _ = parse_num::<u32>(p(), &text, "a number");
                let _ = parse_num::<i64>(p(), &text, "a number");
                let _ = parse_error(p(), "anything", &text).to_string();
            }
        }
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = std::env::temp_dir().join(format!("topomgr-sysfs-read-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = dir.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let random = dir.join("random");
        std::os::unix::fs::symlink("/dev/urandom", &random).unwrap();
        let big = dir.join("big");
        fs::write(&big, vec![b'1'; MAX_ATTRIBUTE_BYTES as usize + 1]).unwrap();
        let fine = dir.join("fine");
        fs::write(&fine, vec![b'7'; MAX_ATTRIBUTE_BYTES as usize]).unwrap();
        let cases = [
            (&fifo, "it is a FIFO; sysfs attributes are regular files"),
            (
                &zero,
                "it is a character device; sysfs attributes are regular files",
            ),
            (
                &random,
                "it is a character device; sysfs attributes are regular files",
            ),
            (
                &dir,
                "it is a directory; sysfs attributes are regular files",
            ),
            (
                &big,
                "it is larger than 1048576 bytes; sysfs attributes are small",
            ),
        ];
        for (path, why) in cases {
            let want = format!("cannot read {}: {why}", path.display());
            assert_eq!(read_mandatory(path).unwrap_err().to_string(), want);
            assert_eq!(read_optional(path).unwrap_err().to_string(), want);
        }
        assert_eq!(
            read_mandatory(&fine).unwrap().len(),
            MAX_ATTRIBUTE_BYTES as usize
        );
        assert_eq!(read_optional(&dir.join("absent")).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn long_content_is_shortened_in_errors() {
        let long = "x".repeat(200);
        let err = parse_error(p(), "an integer", &long).to_string();
        assert_eq!(
            err,
            format!("/s/f: expected an integer, found \"{}...\"", "x".repeat(80))
        );
    }
}
