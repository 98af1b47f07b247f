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
//!  "gpus": [{"uuid": "GPU-0", "bus_id": "00000000:07:00.0",
//!            "nvlinks": [{"active": true, "remote_bus_id": "00000000:0F:00.0", "remote_type": 0}]}],
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
//! * `common_ancestor[i][j]`: the `nvmlGpuTopologyLevel_t` of the pair
//!   (0 internal, 10 single switch, 20 multiple switches, 30 host bridge,
//!   40 node, 50 system).
//! * `fail`: a return code that every call of the named function answers
//!   instead of its data (e.g. 13, `NVML_ERROR_FUNCTION_NOT_FOUND`).
//!
//! Device handles are the GPU's index plus one, cast to a pointer; they are
//! never dereferenced.

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
    with_script("nvmlDeviceGetUUID", |s| match gpu_of(s, device) {
        // SAFETY: forwarded from the caller's contract.
        Some((_, g)) => unsafe { write_c_string(&g.uuid, uuid, length as usize) },
        None => ERROR_INVALID_ARGUMENT,
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
