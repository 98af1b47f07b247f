//! The static policy's options (the kubelet's `cpuManagerPolicyOptions`),
//! parsed and validated as the kubelet does.
//!
//! Every kubelet option is accepted without feature gates (topomgr has none):
//! `full-pcpus-only`, `distribute-cpus-across-numa`, `align-by-socket`,
//! `distribute-cpus-across-cores`, `strict-cpu-reservation`,
//! `prefer-align-cpus-by-uncorecache`. Values are Go booleans (`1`, `t`,
//! `T`, `TRUE`, `true`, `True`, `0`, `f`, `F`, `FALSE`, `false`, `False`).

use std::collections::BTreeMap;

use topomgr_sdk::parse_go_bool;

use crate::topology::CpuTopology;

/// `full-pcpus-only`.
pub const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
/// `distribute-cpus-across-numa`.
pub const DISTRIBUTE_CPUS_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
/// `align-by-socket`.
pub const ALIGN_BY_SOCKET: &str = "align-by-socket";
/// `distribute-cpus-across-cores`.
pub const DISTRIBUTE_CPUS_ACROSS_CORES: &str = "distribute-cpus-across-cores";
/// `strict-cpu-reservation`.
pub const STRICT_CPU_RESERVATION: &str = "strict-cpu-reservation";
/// `prefer-align-cpus-by-uncorecache`.
pub const PREFER_ALIGN_BY_UNCORE_CACHE: &str = "prefer-align-cpus-by-uncorecache";

/// A refused option set (messages as the kubelet's, prefixed by what to do).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// An option name the kubelet does not know.
    #[error("unknown CPU Manager Policy option: {0:?}; known options: full-pcpus-only, distribute-cpus-across-numa, align-by-socket, distribute-cpus-across-cores, strict-cpu-reservation, prefer-align-cpus-by-uncorecache")]
    Unknown(String),
    /// A value that is not a Go boolean.
    #[error("bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    BadBool {
        /// Option name.
        name: String,
        /// The value given.
        value: String,
    },
    /// A value that is neither a string nor a boolean.
    #[error("bad value for option {name:?}: expected a string such as \"true\", got {value}")]
    BadType {
        /// Option name.
        name: String,
        /// The value given, as JSON.
        value: String,
    },
    /// Two options that cannot be combined.
    #[error("static policy options {0} and {1} can not be used at the same time")]
    Conflict(&'static str, &'static str),
    /// align-by-socket on a machine with more sockets than NUMA nodes.
    #[error("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA (this machine: {sockets} sockets, {numa} NUMA nodes); remove the align-by-socket option")]
    AlignBySocketHardware {
        /// Sockets of the machine.
        sockets: usize,
        /// NUMA nodes (with CPUs) of the machine.
        numa: usize,
    },
    /// Options given to the `none` policy.
    #[error(
        "None policy: received unsupported options={0}; options apply to policy \"static\" only"
    )]
    NoneWithOptions(String),
}

/// The parsed options (all false by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StaticOptions {
    /// Exclusive CPUs only in whole physical cores.
    pub full_pcpus_only: bool,
    /// Spread CPUs evenly over NUMA nodes when more than one is needed.
    pub distribute_cpus_across_numa: bool,
    /// Align to sockets rather than NUMA nodes.
    pub align_by_socket: bool,
    /// Spread threads over cores.
    pub distribute_cpus_across_cores: bool,
    /// Keep reserved CPUs out of the shared pool too.
    pub strict_cpu_reservation: bool,
    /// Prefer CPUs sharing an uncore (L3) cache.
    pub prefer_align_by_uncore_cache: bool,
}

impl StaticOptions {
    /// Parses the `[options]` table (string or boolean values) and checks
    /// the combinations the kubelet forbids.
    pub fn parse(raw: &BTreeMap<String, serde_json::Value>) -> Result<Self, OptionsError> {
        let mut o = StaticOptions::default();
        for (name, value) in raw {
            let slot = match name.as_str() {
                FULL_PCPUS_ONLY => &mut o.full_pcpus_only,
                DISTRIBUTE_CPUS_ACROSS_NUMA => &mut o.distribute_cpus_across_numa,
                ALIGN_BY_SOCKET => &mut o.align_by_socket,
                DISTRIBUTE_CPUS_ACROSS_CORES => &mut o.distribute_cpus_across_cores,
                STRICT_CPU_RESERVATION => &mut o.strict_cpu_reservation,
                PREFER_ALIGN_BY_UNCORE_CACHE => &mut o.prefer_align_by_uncore_cache,
                _ => return Err(OptionsError::Unknown(name.clone())),
            };
            *slot = match value {
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::String(s) => {
                    parse_go_bool(s).ok_or_else(|| OptionsError::BadBool {
                        name: name.clone(),
                        value: s.clone(),
                    })?
                }
                other => {
                    return Err(OptionsError::BadType {
                        name: name.clone(),
                        value: other.to_string(),
                    })
                }
            };
        }
        if o.full_pcpus_only && o.distribute_cpus_across_cores {
            return Err(OptionsError::Conflict(
                FULL_PCPUS_ONLY,
                DISTRIBUTE_CPUS_ACROSS_CORES,
            ));
        }
        if o.distribute_cpus_across_numa && o.distribute_cpus_across_cores {
            return Err(OptionsError::Conflict(
                DISTRIBUTE_CPUS_ACROSS_NUMA,
                DISTRIBUTE_CPUS_ACROSS_CORES,
            ));
        }
        if o.prefer_align_by_uncore_cache && o.distribute_cpus_across_cores {
            return Err(OptionsError::Conflict(
                PREFER_ALIGN_BY_UNCORE_CACHE,
                DISTRIBUTE_CPUS_ACROSS_CORES,
            ));
        }
        if o.prefer_align_by_uncore_cache && o.distribute_cpus_across_numa {
            return Err(OptionsError::Conflict(
                PREFER_ALIGN_BY_UNCORE_CACHE,
                DISTRIBUTE_CPUS_ACROSS_NUMA,
            ));
        }
        Ok(o)
    }

    /// The kubelet's machine checks (`ValidateStaticPolicyOptions`).
    ///
    /// The kubelet also refuses align-by-socket under the topology manager's
    /// single-numa-node policy; a provider does not see the host's policy,
    /// so that combination is the operator's to avoid.
    pub fn validate(&self, topo: &CpuTopology) -> Result<(), OptionsError> {
        if self.align_by_socket && topo.num_sockets() > topo.num_numa_nodes() {
            return Err(OptionsError::AlignBySocketHardware {
                sockets: topo.num_sockets(),
                numa: topo.num_numa_nodes(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<StaticOptions, String> {
        let map: BTreeMap<String, serde_json::Value> =
            serde_json::from_value(v).map_err(|e| e.to_string())?;
        StaticOptions::parse(&map).map_err(|e| e.to_string())
    }

    #[test]
    fn values_are_go_booleans() {
        let o = parse(json!({"full-pcpus-only": "True", "strict-cpu-reservation": "1"})).unwrap();
        assert!(o.full_pcpus_only && o.strict_cpu_reservation);
        let o =
            parse(json!({"align-by-socket": true, "distribute-cpus-across-numa": "f"})).unwrap();
        assert!(o.align_by_socket && !o.distribute_cpus_across_numa);
        assert_eq!(
            parse(json!({"full-pcpus-only": "yes"})).unwrap_err(),
            "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        assert_eq!(
            parse(json!({"full-pcpus-only": 1})).unwrap_err(),
            "bad value for option \"full-pcpus-only\": expected a string such as \"true\", got 1"
        );
    }

    #[test]
    fn unknown_and_conflicting_options_are_named() {
        assert_eq!(
            parse(json!({"pack-tightly": "true"})).unwrap_err(),
            "unknown CPU Manager Policy option: \"pack-tightly\"; known options: full-pcpus-only, \
             distribute-cpus-across-numa, align-by-socket, distribute-cpus-across-cores, \
             strict-cpu-reservation, prefer-align-cpus-by-uncorecache"
        );
        let conflicts = [
            ("full-pcpus-only", "distribute-cpus-across-cores"),
            (
                "distribute-cpus-across-numa",
                "distribute-cpus-across-cores",
            ),
            (
                "prefer-align-cpus-by-uncorecache",
                "distribute-cpus-across-cores",
            ),
            (
                "prefer-align-cpus-by-uncorecache",
                "distribute-cpus-across-numa",
            ),
        ];
        for (a, b) in conflicts {
            assert_eq!(
                parse(json!({a: "true", b: "true"})).unwrap_err(),
                format!("static policy options {a} and {b} can not be used at the same time")
            );
        }
        assert!(
            parse(json!({"full-pcpus-only": "true", "distribute-cpus-across-cores": "false"}))
                .is_ok()
        );
    }

    #[test]
    fn align_by_socket_needs_sockets_no_smaller_than_numa_nodes() {
        let o = parse(json!({"align-by-socket": "true"})).unwrap();
        // 4 sockets, 2 NUMA nodes (two sockets per node).
        let mut m = crate::testmachines::layered(2, 1, 2, 1);
        for c in &mut m.cpus {
            c.socket = c.id;
        }
        let t = CpuTopology::from_machine(&m);
        assert_eq!(
            o.validate(&t).unwrap_err().to_string(),
            "Align by socket is not compatible with hardware where number of sockets are more than \
             number of NUMA (this machine: 4 sockets, 2 NUMA nodes); remove the align-by-socket option"
        );
        let ok = CpuTopology::from_machine(&crate::testmachines::dual_socket_multi_numa_ht());
        assert_eq!(o.validate(&ok), Ok(()));
    }
}
