//! The pod fingerprint of the NodeResourceTopology object: the
//! `nodeTopologyPodsFingerprint` attribute, computed as
//! github.com/k8stopologyawareschedwg/podfingerprint specifies (version
//! `v001`, `podfingerprint.go`), with the method attribute
//! `nodeTopologyPodsFingerprintMethod` that library added (its PR #10,
//! "pfp: add constants to declare the compute method").
//!
//! scheduler-plugins' `NodeResourceTopologyMatch` with its reserve cache
//! (`pkg/noderesourcetopology/cache/overreserve.go`) resyncs a node only
//! when the fingerprint of the object equals the one it computes from the
//! pods it sees running there; with the method `with-exclusive-resources`
//! it counts only the pods holding exclusive resources. topomgr knows the
//! pods it admitted, so it declares that method and counts, among them,
//! the pods the scheduler deems exclusive ([`holds_exclusive_resources`],
//! scheduler-plugins' `resourcerequests.AreExclusiveForPod`), each once.
//!
//! The algorithm: each pod is `xxh64(name, seed = xxh64(namespace, 0))`;
//! the values are sorted, written little-endian into one XXH64 (seed 0),
//! and the digest, big-endian hex, follows `pfp0` (prefix) and `v001`
//! (version). The port is tested against the library's own test vector
//! (`nrt/testdata`).

use topomgr_sdk::{PodView, QosClass};

/// The attribute naming the fingerprint (the library's `Attribute`).
pub const ATTRIBUTE: &str = "nodeTopologyPodsFingerprint";
/// The attribute naming how it was computed (`AttributeMethod`).
pub const ATTRIBUTE_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Only the pods holding exclusive resources are counted
/// (`MethodWithExclusiveResources`).
pub const METHOD_WITH_EXCLUSIVE_RESOURCES: &str = "with-exclusive-resources";

/// Whether the scheduler counts `pod` under `with-exclusive-resources`:
/// scheduler-plugins' `resourcerequests.AreExclusiveForPod` and
/// `IsExclusive` (`pkg/noderesourcetopology/resourcerequests`), whose rule
/// is followed here: a request of an extended resource (a name with a `/`
/// outside `kubernetes.io/`) in any container, or, in a Guaranteed pod, an
/// integral CPU request or a memory or hugepages request; over the app
/// containers and the sidecars (init containers that keep running), not
/// the init containers that finish.
pub fn holds_exclusive_resources(pod: &PodView) -> bool {
    let native = |name: &str| !name.contains('/') || name.contains("kubernetes.io/");
    let exclusive = |name: &str, quantity: u64| {
        if !native(name) {
            return true;
        }
        if pod.qos != QosClass::Guaranteed {
            return false;
        }
        match name {
            // Millicores: whole CPUs.
            "cpu" => quantity > 0 && quantity.is_multiple_of(1000),
            "memory" => quantity > 0,
            n if n.starts_with("hugepages-") => quantity > 0,
            _ => false,
        }
    };
    pod.init_containers
        .iter()
        .filter(|c| c.sidecar)
        .chain(&pod.containers)
        .any(|c| c.requests.iter().any(|(n, q)| exclusive(n, *q)))
}

const PREFIX: &str = "pfp0";
const VERSION: &str = "v001";

/// The fingerprint of a set of pods, each named by namespace and name;
/// the order does not matter.
pub fn sign<'a>(pods: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut hashes: Vec<u64> = pods
        .into_iter()
        .map(|(namespace, name)| xxh64(name.as_bytes(), xxh64(namespace.as_bytes(), 0)))
        .collect();
    hashes.sort_unstable();
    let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    let sum = xxh64(&bytes, 0);
    let mut out = String::with_capacity(PREFIX.len() + VERSION.len() + 16);
    out.push_str(PREFIX);
    out.push_str(VERSION);
    out.push_str(&format!("{sum:016x}"));
    out
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

fn merge(acc: u64, val: u64) -> u64 {
    (acc ^ round(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn le32(b: &[u8]) -> u64 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u64::from(u32::from_le_bytes(a))
}

/// XXH64 of `data` with `seed` (the xxHash specification, as the Go
/// library `github.com/OneOfOne/xxhash` the fingerprint uses computes it).
fn xxh64(data: &[u8], seed: u64) -> u64 {
    let mut rest = data;
    let mut h = if data.len() >= 32 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while rest.len() >= 32 {
            for (i, acc) in v.iter_mut().enumerate() {
                *acc = round(*acc, le64(&rest[i * 8..]));
            }
            rest = &rest[32..];
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for acc in v {
            h = merge(h, acc);
        }
        h
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(data.len() as u64);
    while rest.len() >= 8 {
        h ^= round(0, le64(rest));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        h ^= le32(rest).wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h ^= u64::from(b).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Pod {
        namespace: String,
        name: String,
    }

    fn upstream_pods() -> Vec<Pod> {
        serde_json::from_str(include_str!("testdata/podfingerprint-pods.json")).unwrap()
    }

    /// The library's `TestCheck` "correct fingerprint" case: its pod list
    /// signs as `pfp0v001e477a4e3b2fc0ec6`.
    #[test]
    fn the_upstream_test_vector_signs_alike() {
        let pods = upstream_pods();
        assert!(pods.len() > 100);
        let got = sign(pods.iter().map(|p| (p.namespace.as_str(), p.name.as_str())));
        assert_eq!(got, "pfp0v001e477a4e3b2fc0ec6");
    }

    /// The library's `TestSumStable`/`TestSign`: the order of the pods does
    /// not change the fingerprint; a pod more or less does.
    #[test]
    fn the_order_does_not_matter_and_the_set_does() {
        let pods = upstream_pods();
        let ids: Vec<(&str, &str)> = pods
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        let mut reversed = ids.clone();
        reversed.reverse();
        reversed.rotate_left(17);
        assert_eq!(sign(ids.iter().copied()), sign(reversed.iter().copied()));
        assert_ne!(sign(ids.iter().copied()), sign(ids.iter().copied().skip(1)));
        // The namespace seeds the name: swapping them is another pod.
        assert_ne!(sign([("a", "b")]), sign([("b", "a")]));
    }

    /// XXH64 against the reference implementation's published values
    /// (xxHash's sanity checks: the empty input, and "abc" / a 32-byte-plus
    /// input with and without a seed, as the `twox-hash` crate computes
    /// them independently).
    #[test]
    fn xxh64_matches_the_reference() {
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        let long: Vec<u8> = (0u8..=200).collect();
        for seed in [0u64, 1, 0x9E37_79B1, u64::MAX] {
            for len in [0usize, 3, 4, 7, 8, 31, 32, 33, 64, 100, 201] {
                let want = twox_hash::XxHash64::oneshot(seed, &long[..len]);
                assert_eq!(xxh64(&long[..len], seed), want, "len {len} seed {seed}");
            }
        }
    }

    #[test]
    fn exclusive_pods_are_those_the_scheduler_counts() {
        use topomgr_sdk::ContainerView;
        let pod = |qos, init: Vec<ContainerView>, app: Vec<ContainerView>| {
            PodView::new("u", "p", "ns", qos)
                .with_init_containers(init)
                .with_containers(app)
        };
        let c = |reqs: &[(&str, u64)]| {
            ContainerView::new("c")
                .with_requests(reqs.iter().map(|(n, q)| ((*n).to_owned(), *q)).collect())
        };
        let g = QosClass::Guaranteed;
        let b = QosClass::Burstable;
        let cases = [
            (
                pod(g, vec![], vec![c(&[("cpu", 2000), ("memory", 1 << 30)])]),
                true,
            ),
            // Guaranteed memory alone is exclusive (the Memory Manager's).
            (
                pod(g, vec![], vec![c(&[("cpu", 500), ("memory", 1 << 30)])]),
                true,
            ),
            (pod(g, vec![], vec![c(&[("cpu", 1500)])]), false),
            (pod(g, vec![], vec![c(&[("cpu", 1000)])]), true),
            (pod(g, vec![], vec![c(&[("hugepages-2Mi", 1 << 21)])]), true),
            (
                pod(b, vec![], vec![c(&[("cpu", 2000), ("memory", 1 << 30)])]),
                false,
            ),
            // Devices in any QoS; not a kubernetes.io/ name.
            (pod(b, vec![], vec![c(&[("example.com/gpu", 1)])]), true),
            (
                pod(b, vec![], vec![c(&[("kubernetes.io/batch-cpu", 1)])]),
                false,
            ),
            // An init container that finishes does not count; a sidecar does.
            (
                pod(b, vec![c(&[("example.com/gpu", 1)])], vec![c(&[])]),
                false,
            ),
            (
                pod(
                    b,
                    vec![c(&[("example.com/gpu", 1)]).with_sidecar(true)],
                    vec![c(&[])],
                ),
                true,
            ),
        ];
        for (i, (p, want)) in cases.iter().enumerate() {
            assert_eq!(holds_exclusive_resources(p), *want, "case {i}");
        }
    }

    #[test]
    fn the_empty_set_has_a_fingerprint() {
        let empty = sign(std::iter::empty());
        assert!(empty.starts_with("pfp0v001"));
        assert_eq!(empty.len(), 24);
    }
}
