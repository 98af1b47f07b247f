//! A scripted stand-in for `libnvidia-ml.so`, so the GPU provider's NVML
//! discovery runs in tests on machines without an NVIDIA driver.
//!
//! It exports the C functions of NVML that the provider (through
//! `nvml-wrapper`) calls, with NVML's signatures, and answers them from a
//! JSON script read at every `nvmlInit_v2` from the file named by the
//! environment variable `FAKE_NVML_SCRIPT`:
//!
//! ```json
//! {"init": 0,
//!  "driver_version": "550.54.15",
//!  "gpus": [{"uuid": "GPU-0", "bus_id": "00000000:07:00.0", "minor": 0,
//!            "nvlinks": [{"active": true, "remote_bus_id": "00000000:0F:00.0", "remote_type": 0}],
//!            "mig": {"current": 1, "pending": 1, "max": 7, "devices": ["MIG-…", null, "MIG-…"]}}],
//!  "common_ancestor": [[0, 10], [10, 0]],
//!  "fail": {"nvmlDeviceGetUUID": 999}}
//! ```
//!
//! * `init`: the return code of `nvmlInit_v2` (default 0, success; 9 is
//!   `NVML_ERROR_DRIVER_NOT_LOADED`). A missing or unreadable script also
//!   fails the init with `NVML_ERROR_DRIVER_NOT_LOADED`.
//! * `gpus`: one entry per GPU in NVML index order; `nvlinks[l]` describes
//!   link `l` (`remote_type`: 0 GPU, 1 IBM NPU, 2 NVSwitch, 255 unknown);
//!   links past the list answer `NVML_ERROR_INVALID_ARGUMENT`.
//!   `minor`: the number of its device node `/dev/nvidia<minor>`
//!   (`nvmlDeviceGetMinorNumber`; absent: `NVML_ERROR_NOT_SUPPORTED`).
//!   `mig`: its MIG mode (`nvmlDeviceGetMigMode`: `current`, `pending`, 1
//!   enabled; absent: `NVML_ERROR_NOT_SUPPORTED`, a GPU without MIG), the
//!   maximum number of MIG devices (`nvmlDeviceGetMaxMigDeviceCount`;
//!   default: the length of `devices`) and the MIG devices by index
//!   (`nvmlDeviceGetMigDeviceHandleByIndex`: a UUID, or `null` for an index
//!   without one, which answers `NVML_ERROR_NOT_FOUND` as NVML does).
//! * `common_ancestor[i][j]`: the `nvmlGpuTopologyLevel_t` of the pair
//!   (0 internal, 10 single switch, 20 multiple switches, 30 host bridge,
//!   40 node, 50 system).
//! * `fail`: a return code that every call of the named function answers
//!   instead of its data (e.g. 13, `NVML_ERROR_FUNCTION_NOT_FOUND`).
//!
//! Device handles are the GPU's index plus one, cast to a pointer; a MIG
//! device's handle adds its index plus one times [`MIG_HANDLE`]. Handles
//! are never dereferenced. `nvmlDeviceGetUUID` answers a MIG device's
//! UUID for its handle; the other functions know GPUs only.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Mutex;

use serde::Deserialize;

type Ret = c_uint;
const SUCCESS: Ret = 0;
const ERROR_INVALID_ARGUMENT: Ret = 2;
const ERROR_DRIVER_NOT_LOADED: Ret = 9;
const ERROR_INSUFFICIENT_SIZE: Ret = 7;
const ERROR_UNINITIALIZED: Ret = 1;
const ERROR_NOT_SUPPORTED: Ret = 3;
const ERROR_NOT_FOUND: Ret = 6;

/// The step between the handles of a GPU's MIG devices (see the crate
/// docs): handle = GPU index + 1 + (MIG index + 1) × `MIG_HANDLE`.
pub const MIG_HANDLE: usize = 1 << 16;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Script {
    #[serde(default)]
    init: Ret,
    #[serde(default)]
    driver_version: Option<String>,
    #[serde(default)]
    gpus: Vec<Gpu>,
    #[serde(default)]
    common_ancestor: Vec<Vec<c_uint>>,
    #[serde(default)]
    fail: BTreeMap<String, Ret>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gpu {
    uuid: String,
    bus_id: String,
    #[serde(default)]
    nvlinks: Vec<NvLink>,
    #[serde(default)]
    minor: Option<c_uint>,
    #[serde(default)]
    mig: Option<Mig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mig {
    #[serde(default)]
    current: c_uint,
    #[serde(default)]
    pending: c_uint,
    #[serde(default)]
    max: Option<c_uint>,
    #[serde(default)]
    devices: Vec<Option<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NvLink {
    #[serde(default = "yes")]
    active: bool,
    remote_bus_id: String,
    #[serde(default)]
    remote_type: c_uint,
}

fn yes() -> bool {
    true
}

static SCRIPT: Mutex<Option<Script>> = Mutex::new(None);

fn load_script() -> Option<Script> {
    let path = std::env::var_os("FAKE_NVML_SCRIPT")?;
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Runs `f` on the script loaded by the last successful init, unless the
/// script makes `func` fail.
fn with_script(func: &str, f: impl FnOnce(&Script) -> Ret) -> Ret {
    let guard = match SCRIPT.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    match guard.as_ref() {
        None => ERROR_UNINITIALIZED,
        Some(s) => match s.fail.get(func) {
            Some(&code) => code,
            None => f(s),
        },
    }
}

fn gpu_of(s: &Script, device: *mut c_void) -> Option<(usize, &Gpu)> {
    let i = (device as usize).checked_sub(1)?;
    s.gpus.get(i).map(|g| (i, g))
}

/// The UUID of the MIG device whose handle is `device`.
fn mig_of(s: &Script, device: *mut c_void) -> Option<&str> {
    let handle = device as usize;
    let gpu = (handle % MIG_HANDLE).checked_sub(1)?;
    let index = (handle / MIG_HANDLE).checked_sub(1)?;
    s.gpus
        .get(gpu)?
        .mig
        .as_ref()?
        .devices
        .get(index)?
        .as_deref()
}

/// Copies `text` NUL-terminated into `buf` of `len` bytes.
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes.
unsafe fn write_c_string(text: &str, buf: *mut c_char, len: usize) -> Ret {
    if buf.is_null() || text.len() >= len {
        return ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller promises `len` writable bytes at `buf`, and
    // `text.len() + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    SUCCESS
}

/// NVML's `nvmlPciInfo_t` (the `_v3` layout).
#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// Fills `info` from a bus id such as `00000000:07:00.0`.
///
/// # Safety
/// `info` must point to a writable `PciInfo`.
unsafe fn write_pci_info(bus_id: &str, info: *mut PciInfo) -> Ret {
    if info.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let mut parts = bus_id.split([':', '.']);
    let mut next = || {
        parts
            .next()
            .and_then(|p| c_uint::from_str_radix(p, 16).ok())
            .unwrap_or(0)
    };
    let (domain, bus, device) = (next(), next(), next());
    // SAFETY: the caller promises a writable `PciInfo` at `info`; the
    // string writes stay inside its arrays (checked by write_c_string).
    unsafe {
        (*info).domain = domain;
        (*info).bus = bus;
        (*info).device = device;
        (*info).pci_device_id = 0x2330_10de;
        (*info).pci_sub_system_id = 0;
        let short = bus_id.get(4..).unwrap_or(bus_id);
        let _ = write_c_string(short, (*info).bus_id_legacy.as_mut_ptr(), 16);
        write_c_string(bus_id, (*info).bus_id.as_mut_ptr(), 32)
    }
}

/// `nvmlInit_v2`: loads the script.
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> Ret {
    let Some(script) = load_script() else {
        return ERROR_DRIVER_NOT_LOADED;
    };
    let code = script.init;
    if code == SUCCESS {
        let mut guard = match SCRIPT.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *guard = Some(script);
    }
    code
}

/// `nvmlShutdown`.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> Ret {
    SUCCESS
}

/// `nvmlSystemGetDriverVersion`.
///
/// # Safety
/// `version` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    with_script("nvmlSystemGetDriverVersion", |s| {
        let v = s.driver_version.as_deref().unwrap_or("999.99");
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_c_string(v, version, length as usize) }
    })
}

/// `nvmlDeviceGetCount_v2`.
///
/// # Safety
/// `count` must point to a writable `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    with_script("nvmlDeviceGetCount_v2", |s| {
        if count.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *count = s.gpus.len() as c_uint };
        SUCCESS
    })
}

/// `nvmlDeviceGetHandleByIndex_v2`.
///
/// # Safety
/// `device` must point to a writable handle.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut *mut c_void,
) -> Ret {
    with_script("nvmlDeviceGetHandleByIndex_v2", |s| {
        if device.is_null() || index as usize >= s.gpus.len() {
            return ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *device = (index as usize + 1) as *mut c_void };
        SUCCESS
    })
}

/// `nvmlDeviceGetUUID`.
///
/// # Safety
/// `uuid` must be valid for `length` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: *mut c_void,
    uuid: *mut c_char,
    length: c_uint,
) -> Ret {
    with_script("nvmlDeviceGetUUID", |s| {
        let text = match gpu_of(s, device) {
            Some((_, g)) => g.uuid.as_str(),
            None => match mig_of(s, device) {
                Some(u) => u,
                None => return ERROR_INVALID_ARGUMENT,
            },
        };
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_c_string(text, uuid, length as usize) }
    })
}

/// `nvmlDeviceGetPciInfo_v3`.
///
/// # Safety
/// `pci` must point to a writable `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: *mut c_void, pci: *mut PciInfo) -> Ret {
    with_script("nvmlDeviceGetPciInfo_v3", |s| match gpu_of(s, device) {
        // SAFETY: forwarded from the caller's contract.
        Some((_, g)) => unsafe { write_pci_info(&g.bus_id, pci) },
        None => ERROR_INVALID_ARGUMENT,
    })
}

/// `nvmlDeviceGetTopologyCommonAncestor`.
///
/// # Safety
/// `level` must point to a writable `nvmlGpuTopologyLevel_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: *mut c_void,
    device2: *mut c_void,
    level: *mut c_uint,
) -> Ret {
    with_script("nvmlDeviceGetTopologyCommonAncestor", |s| {
        let (Some((i, _)), Some((j, _))) = (gpu_of(s, device1), gpu_of(s, device2)) else {
            return ERROR_INVALID_ARGUMENT;
        };
        let Some(&l) = s.common_ancestor.get(i).and_then(|row| row.get(j)) else {
            return ERROR_INVALID_ARGUMENT;
        };
        if level.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *level = l };
        SUCCESS
    })
}

fn link_of(s: &Script, device: *mut c_void, link: c_uint) -> Option<&NvLink> {
    gpu_of(s, device)?.1.nvlinks.get(link as usize)
}

/// `nvmlDeviceGetNvLinkState`.
///
/// # Safety
/// `active` must point to a writable `nvmlEnableState_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: *mut c_void,
    link: c_uint,
    active: *mut c_uint,
) -> Ret {
    with_script("nvmlDeviceGetNvLinkState", |s| {
        match (link_of(s, device, link), active.is_null()) {
            (Some(l), false) => {
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { *active = c_uint::from(l.active) };
                SUCCESS
            }
            _ => ERROR_INVALID_ARGUMENT,
        }
    })
}

/// `nvmlDeviceGetNvLinkRemotePciInfo_v2`.
///
/// # Safety
/// `pci` must point to a writable `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: *mut c_void,
    link: c_uint,
    pci: *mut PciInfo,
) -> Ret {
    with_script("nvmlDeviceGetNvLinkRemotePciInfo_v2", |s| {
        match link_of(s, device, link) {
            // SAFETY: forwarded from the caller's contract.
            Some(l) => unsafe { write_pci_info(&l.remote_bus_id, pci) },
            None => ERROR_INVALID_ARGUMENT,
        }
    })
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`.
///
/// # Safety
/// `kind` must point to a writable `nvmlIntNvLinkDeviceType_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    device: *mut c_void,
    link: c_uint,
    kind: *mut c_uint,
) -> Ret {
    with_script("nvmlDeviceGetNvLinkRemoteDeviceType", |s| {
        match (link_of(s, device, link), kind.is_null()) {
            (Some(l), false) => {
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { *kind = l.remote_type };
                SUCCESS
            }
            _ => ERROR_INVALID_ARGUMENT,
        }
    })
}

/// `nvmlDeviceGetMinorNumber`.
///
/// # Safety
/// `minor` must point to a writable `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: *mut c_void, minor: *mut c_uint) -> Ret {
    with_script("nvmlDeviceGetMinorNumber", |s| {
        let Some((_, g)) = gpu_of(s, device) else {
            return ERROR_INVALID_ARGUMENT;
        };
        let Some(m) = g.minor else {
            return ERROR_NOT_SUPPORTED;
        };
        if minor.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *minor = m };
        SUCCESS
    })
}

/// `nvmlDeviceGetMigMode`.
///
/// # Safety
/// `current` and `pending` must point to writable `unsigned int`s.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: *mut c_void,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    with_script("nvmlDeviceGetMigMode", |s| {
        let Some((_, g)) = gpu_of(s, device) else {
            return ERROR_INVALID_ARGUMENT;
        };
        let Some(mig) = &g.mig else {
            return ERROR_NOT_SUPPORTED;
        };
        if current.is_null() || pending.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the caller's contract.
        unsafe {
            *current = mig.current;
            *pending = mig.pending;
        }
        SUCCESS
    })
}

/// `nvmlDeviceGetMaxMigDeviceCount`.
///
/// # Safety
/// `count` must point to a writable `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: *mut c_void,
    count: *mut c_uint,
) -> Ret {
    with_script("nvmlDeviceGetMaxMigDeviceCount", |s| {
        let Some((_, g)) = gpu_of(s, device) else {
            return ERROR_INVALID_ARGUMENT;
        };
        let Some(mig) = &g.mig else {
            return ERROR_NOT_SUPPORTED;
        };
        if count.is_null() {
            return ERROR_INVALID_ARGUMENT;
        }
        let max = mig.max.unwrap_or(mig.devices.len() as c_uint);
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *count = max };
        SUCCESS
    })
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`: `NVML_ERROR_NOT_FOUND` for an
/// index below the maximum without a MIG device, as NVML answers.
///
/// # Safety
/// `mig_device` must point to a writable handle.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: *mut c_void,
    index: c_uint,
    mig_device: *mut *mut c_void,
) -> Ret {
    with_script("nvmlDeviceGetMigDeviceHandleByIndex", |s| {
        let Some((gpu, g)) = gpu_of(s, device) else {
            return ERROR_INVALID_ARGUMENT;
        };
        let Some(mig) = &g.mig else {
            return ERROR_NOT_SUPPORTED;
        };
        let max = mig.max.unwrap_or(mig.devices.len() as c_uint);
        if mig_device.is_null() || index >= max {
            return ERROR_INVALID_ARGUMENT;
        }
        match mig.devices.get(index as usize) {
            Some(Some(_)) => {
                let handle = gpu + 1 + (index as usize + 1) * MIG_HANDLE;
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { *mig_device = handle as *mut c_void };
                SUCCESS
            }
            _ => ERROR_NOT_FOUND,
        }
    })
}
