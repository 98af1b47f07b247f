//! Which GPUs to hand out: go-gpuallocator's `best-effort` and `simple`
//! policies, as NVIDIA's device plugin runs them in `GetPreferredAllocation`
//! (`internal/rm/nvml_manager.go`, `alignedAlloc`: the available and the
//! must-include device ids are looked up among the machine's GPUs, an
//! unknown id is an error, and the best-effort policy picks the set).
//!
//! [`Chooser::choose`] is the entry point; [`besteffort::best_effort`] and
//! [`simple`] work on GPU indices. The literal port of upstream's exhaustive
//! search (`exhaustive`, the test oracle and the benchmarks' baseline) is
//! built only for tests and with the feature `oracles`.
//!
//! # Parity with upstream, and two deliberate differences
//!
//! Results equal NVIDIA/go-gpuallocator's at commit 876e7b7 (`gpuallocator/
//! besteffort_policy.go`, `simple_policy.go`), including their order and
//! their dependence on the order of `available`, except for two upstream
//! defects that are not reproduced:
//!
//! 1. **Padding is never returned.** When `size` does not divide the number
//!    of available GPUs, upstream pads the list with `nil` devices and may
//!    return the padded set of the winning partition, so fewer than `size`
//!    devices come back (a `nil` the plugin then dereferences). Here only
//!    unpadded sets are candidates for the result (the fix proposed in
//!    upstream PR #80, still open): whenever `size` GPUs are available and
//!    the required ones among them, exactly `size` come back. The winning
//!    partition itself is chosen exactly as upstream.
//! 2. **No slice aliasing.** Upstream's recursive partition search appends
//!    to a shared `accum` slice; from the 7th set of a partition on, Go's
//!    `append` writes into a backing array that the recorded best partition
//!    still points to, so later candidates overwrite its last sets and the
//!    returned set can come from a partition that never won. Here the best
//!    partition is the one that scored best, as upstream intends.
//!
//! Inputs upstream cannot express are refused instead of guessed: a device
//! id listed twice in `available` or in `required` ([`ChoiceError`]).

pub mod besteffort;
#[cfg(any(test, feature = "oracles"))]
pub mod exhaustive;

use serde::Deserialize;

use crate::topology::GpuTopology;

/// `allocation_policy`: how GPUs are chosen inside the aligned set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "String")]
pub enum Policy {
    /// go-gpuallocator's best-effort policy: the NVLink/PCIe-aware
    /// partition search (the device plugin's choice).
    #[default]
    BestEffort,
    /// go-gpuallocator's simple policy: the required GPUs, then the rest by
    /// index.
    Simple,
}

impl Policy {
    /// The config name (`best-effort`, `simple`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::BestEffort => "best-effort",
            Policy::Simple => "simple",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<String> for Policy {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        match name.as_str() {
            "best-effort" => Ok(Policy::BestEffort),
            "simple" => Ok(Policy::Simple),
            _ => Err(format!(
                "unknown policy `{name}` (known: best-effort, simple)"
            )),
        }
    }
}

/// Pair scores over GPU indices (upstream's `calculateGPUPairScore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scores {
    n: usize,
    w: Vec<i64>,
}

impl Scores {
    /// The pair scores of `topology`.
    pub fn from_topology(topology: &GpuTopology) -> Self {
        Self::from_fn(topology.len(), |a, b| i64::from(topology.pair_score(a, b)))
    }

    /// Scores from a function of two distinct GPU indices (made symmetric
    /// by the caller; the diagonal is 0).
    pub fn from_fn(n: usize, f: impl Fn(usize, usize) -> i64) -> Self {
        let mut w = vec![0; n * n];
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    w[a * n + b] = f(a, b);
                }
            }
        }
        Scores { n, w }
    }

    /// The score of GPUs `a` and `b` (0 for `a == b` or out of range).
    pub fn get(&self, a: usize, b: usize) -> i64 {
        if a < self.n && b < self.n {
            self.w[a * self.n + b]
        } else {
            0
        }
    }

    /// Number of GPUs.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there are no GPUs.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// upstream's `simplePolicy.Allocate` over GPU indices: `required` (in its
/// order), then the other available GPUs by index; empty when `size` is 0,
/// fewer than `size` are available, more than `size` are required, or a
/// required GPU is not available.
pub fn simple(available: &[usize], required: &[usize], size: usize) -> Vec<usize> {
    if size == 0 || available.len() < size || required.len() > size {
        return Vec::new();
    }
    if !required.iter().all(|r| available.contains(r)) {
        return Vec::new();
    }
    let mut rest: Vec<usize> = available
        .iter()
        .copied()
        .filter(|a| !required.contains(a))
        .collect();
    rest.sort_unstable();
    rest.dedup();
    let mut chosen = required.to_vec();
    chosen.extend(rest.into_iter().take(size - required.len()));
    chosen
}

/// Ids that cannot be chosen from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// An id that is not one of the machine's GPUs.
    #[error("{list} device `{id}` is not a GPU of this machine")]
    UnknownDevice {
        /// `available` or `must-include`.
        list: &'static str,
        /// The id.
        id: String,
    },
    /// An id listed twice.
    #[error("{list} device `{id}` is listed twice")]
    Duplicate {
        /// `available` or `must-include`.
        list: &'static str,
        /// The id.
        id: String,
    },
}

/// Chooses GPUs by device id on one machine's topology.
#[derive(Debug, Clone)]
pub struct Chooser {
    topology: GpuTopology,
    scores: Scores,
    policy: Policy,
}

impl Chooser {
    /// A chooser over `topology` with `policy`.
    pub fn new(topology: GpuTopology, policy: Policy) -> Self {
        Chooser {
            scores: Scores::from_topology(&topology),
            topology,
            policy,
        }
    }

    /// The topology chosen on.
    pub fn topology(&self) -> &GpuTopology {
        &self.topology
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The device plugin's `GetPreferredAllocation`: `size` device ids out
    /// of `available` (in the kubelet's order, which best-effort results
    /// depend on, as upstream's) including every id of `required`, in the
    /// policy's order. Empty when the policy finds nothing (see
    /// [`besteffort::best_effort`] and [`simple`]).
    pub fn choose<S: AsRef<str>>(
        &self,
        available: &[S],
        required: &[S],
        size: usize,
    ) -> Result<Vec<String>, ChoiceError> {
        let available = self.indices("available", available)?;
        let required = self.indices("must-include", required)?;
        let chosen = match self.policy {
            Policy::BestEffort => {
                besteffort::best_effort(&self.scores, &available, &required, size)
            }
            Policy::Simple => simple(&available, &required, size),
        };
        Ok(chosen
            .into_iter()
            .map(|i| self.topology.gpus()[i].id.clone())
            .collect())
    }

    fn indices<S: AsRef<str>>(
        &self,
        list: &'static str,
        ids: &[S],
    ) -> Result<Vec<usize>, ChoiceError> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let id = id.as_ref();
            let index = self
                .topology
                .index_of(id)
                .ok_or_else(|| ChoiceError::UnknownDevice {
                    list,
                    id: id.to_owned(),
                })?;
            if out.contains(&index) {
                return Err(ChoiceError::Duplicate {
                    list,
                    id: id.to_owned(),
                });
            }
            out.push(index);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod exactness;
#[cfg(test)]
mod tests;
