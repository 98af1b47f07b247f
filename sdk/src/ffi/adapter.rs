//! The plugin side: a safe [`Provider`] behind the method table, every call
//! inside `catch_unwind`, and the root module [`export_provider!`](crate::export_provider)
//! exports.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Once;

use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};

use super::abi::*;
use super::convert::*;
use super::handle::ProviderHandle;
use crate::{
    AssignedDevicesRequest, ContainerView, PodView, PreferredAllocationRequest, Provider,
    ProviderConfig, ProviderContext, ProviderError, TopologyHint,
};

/// Text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

thread_local! {
    /// How many guarded calls this thread is inside: the plugin's panic hook
    /// stays quiet there (the guard reports the panic).
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the last panic inside a guarded call happened.
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per plugin, a panic hook that prints nothing for a panic
/// inside a guarded call (it keeps the location for the guard, which logs
/// the panic once, through `tracing`, naming the provider) and leaves every
/// other panic to the hook that was installed before. Each cdylib carries
/// its own copy of `std` and with it its own hook, so this is the plugin's
/// hook only; in-process providers (tests) keep the host's.
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) > 0 {
                let at = info.location().map(ToString::to_string);
                PANICKED_AT.with(|p| *p.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` for `provider`, turning a panic into a [`PANIC_REASON`] error
/// that names the call, and logging it once as an error event.
fn guarded<T>(
    provider: &str,
    call: &str,
    f: impl FnOnce() -> Result<T, ProviderError>,
) -> RResult<T, FfiError> {
    GUARDED.with(|g| g.set(g.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    match outcome {
        Ok(Ok(v)) => RResult::ROk(v),
        Ok(Err(e)) => RResult::RErr(e.into()),
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            let at = PANICKED_AT.with(|p| p.borrow_mut().take());
            tracing::error!(
                provider,
                call,
                panic = %msg,
                at = at.as_deref().unwrap_or("unknown"),
                "provider panicked; the call fails with {PANIC_REASON}"
            );
            RResult::RErr(FfiError {
                reason: PANIC_REASON.into(),
                message: format!("the provider panicked in {call}: {msg}").into(),
            })
        }
    }
}

/// Wraps a safe [`Provider`] as an [`FfiProvider`].
struct Adapter<P: Provider> {
    /// The provider's name, for the log.
    name: String,
    inner: P,
    /// The pod last shared with [`METHOD_SHARE_POD`].
    shared: Option<PodView>,
}

/// The pod a call is about: the shared one when the host sent `""`.
fn call_pod<'a>(
    shared: &'a Option<PodView>,
    json: &str,
    parsed: &'a mut Option<PodView>,
) -> Result<&'a PodView, ProviderError> {
    if json.is_empty() {
        return shared.as_ref().ok_or_else(|| {
            ProviderError::new(
                INVALID_INPUT_REASON,
                "the host referred to the shared pod, but shared none",
            )
        });
    }
    Ok(parsed.insert(from_host("pod", json)?))
}

impl<P: Provider> Adapter<P> {
    fn named_call(&mut self, method: &str, request: &str) -> Result<Option<String>, ProviderError> {
        match method {
            METHOD_SHARE_POD => {
                self.shared = Some(from_host("pod", request)?);
                Ok(Some("{}".to_owned()))
            }
            METHOD_PREFERRED_ALLOCATION => {
                let req: PreferredAllocationRequest = from_host("request", request)?;
                let devices = self.inner.preferred_allocation(&req)?;
                to_json(&PreferredAnswer { devices }).map(Some)
            }
            METHOD_INVENTORY => to_json(&self.inner.inventory()?).map(Some),
            METHOD_ASSIGNED_DEVICE_HINTS => {
                let req: AssignedDevicesRequest = from_host("request", request)?;
                to_json(&self.inner.assigned_device_hints(&req)?).map(Some)
            }
            METHOD_EXCLUDE_CPUS => {
                let req: ExcludeCpus = from_host("request", request)?;
                let cpus = crate::CpuSet::parse(&req.cpus).map_err(|e| {
                    ProviderError::new(
                        INVALID_INPUT_REASON,
                        format!("the host sent CPUs to exclude that are not a Linux CPU list: {e}"),
                    )
                })?;
                let excluded = self.inner.exclude_cpus(&cpus)?;
                to_json(&Excluded { excluded }).map(Some)
            }
            METHOD_DEVICE_IDENTITIES => to_json(&self.inner.device_identities()?).map(Some),
            METHOD_RESIZE => {
                let req: ResizeRequest = from_host("resize request", request)?;
                let allocation =
                    self.inner
                        .resize(&req.pod, &req.container, &req.current, &req.hint)?;
                to_json(&Resized { allocation }).map(Some)
            }
            _ => Ok(None),
        }
    }
}

impl<P: Provider> FfiProvider for Adapter<P> {
    fn topology_hints(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
    ) -> RResult<FfiProviderHints, FfiError> {
        guarded(&self.name, "topology_hints", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            let container: ContainerView = from_host("container", container.as_str())?;
            self.inner
                .topology_hints(pod, &container)
                .map(|h| hints_to_ffi(&h))
        })
    }

    fn pod_topology_hints(&mut self, pod: RStr<'_>) -> RResult<FfiProviderHints, FfiError> {
        guarded(&self.name, "pod_topology_hints", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            self.inner.pod_topology_hints(pod).map(|h| hints_to_ffi(&h))
        })
    }

    fn allocate(
        &mut self,
        pod: RStr<'_>,
        container: RStr<'_>,
        hint: FfiHint,
    ) -> RResult<RString, FfiError> {
        guarded(&self.name, "allocate", || {
            let mut parsed = None;
            let pod = call_pod(&self.shared, pod.as_str(), &mut parsed)?;
            let container: ContainerView = from_host("container", container.as_str())?;
            let a = self
                .inner
                .allocate(pod, &container, &TopologyHint::from(hint))?;
            to_json(&a).map(RString::from)
        })
    }

    fn release(&mut self, pod_uid: RStr<'_>, container: RStr<'_>) -> RResult<(), FfiError> {
        guarded(&self.name, "release", || {
            self.inner.release(pod_uid.as_str(), container.as_str())
        })
    }

    fn checkpoint(&self) -> RResult<RVec<u8>, FfiError> {
        guarded(&self.name, "checkpoint", || {
            self.inner.checkpoint().map(RVec::from)
        })
    }

    fn restore(&mut self, data: RSlice<'_, u8>) -> RResult<RString, FfiError> {
        guarded(&self.name, "restore", || {
            let report = self.inner.restore(data.as_slice())?;
            to_json(&report).map(RString::from)
        })
    }

    fn call(&mut self, method: RStr<'_>, request: RStr<'_>) -> RResult<ROption<RString>, FfiError> {
        let name = self.name.clone();
        guarded(&name, method.as_str(), || {
            self.named_call(method.as_str(), request.as_str())
                .map(|answer| answer.map(RString::from).into())
        })
    }
}

/// The constructor the root module exports for provider type `P`.
extern "C" fn new_provider<P: Provider>(init: FfiInit) -> RResult<FfiProviderBox, FfiError> {
    let log = init.log;
    crate::log::install(
        level_from_u8(init.log_max_level),
        Box::new(move |level, target, message| {
            log(level_to_u8(level), target.into(), message.into())
        }),
    );
    install_quiet_panic_hook();
    construct_adapter::<P>(&init)
}

/// Decodes the constructor's input and builds `P` behind the adapter.
fn construct_adapter<P: Provider>(init: &FfiInit) -> RResult<FfiProviderBox, FfiError> {
    let req: InitRequest = match from_host("init request", init.init_json.as_str()) {
        Ok(req) => req,
        Err(e) => return RResult::RErr(e.into()),
    };
    let name = req.name.clone();
    guarded(&name, "new", || {
        let config = ProviderConfig(req.config);
        let ctx = ProviderContext::new(&req.machine, &config, Path::new(&req.state_dir))
            .with_config_dir(req.config_dir.as_deref().map(Path::new));
        let provider = P::new(&ctx)?;
        tracing::debug!(provider = req.name.as_str(), "provider constructed");
        Ok(FfiProvider_TO::from_value(
            Adapter {
                name: req.name,
                inner: provider,
                shared: None,
            },
            abi_stable::sabi_trait::TD_Opaque,
        ))
    })
}

/// Builds the root module for provider type `P`; used by
/// [`export_provider!`](crate::export_provider).
pub fn root_module<P: Provider>() -> ProviderModRef {
    use abi_stable::prefix_type::PrefixTypeTrait;
    ProviderMod {
        sdk_abi_version: SDK_ABI_VERSION,
        new: new_provider::<P>,
    }
    .leak_into_prefix()
}

/// Wraps `P` in the boundary adapter in-process, without a shared library:
/// the same catch_unwind guard and conversions the host sees.
pub fn in_process<P: Provider>(provider: P) -> ProviderHandle {
    ProviderHandle::new(FfiProvider_TO::from_value(
        Adapter {
            name: std::any::type_name::<P>().to_owned(),
            inner: provider,
            shared: None,
        },
        abi_stable::sabi_trait::TD_Opaque,
    ))
}

/// Runs `P`'s constructor in-process on `init` (JSON, as a host sends it):
/// the same decoding and panic guard as a loaded plugin. The log callback is
/// not installed (the provider already logs to the caller's subscriber).
pub fn construct_in_process<P: Provider>(init: FfiInit) -> Result<ProviderHandle, ProviderError> {
    match construct_adapter::<P>(&init) {
        RResult::ROk(b) => Ok(ProviderHandle::new(b)),
        RResult::RErr(e) => Err(e.into()),
    }
}
