//! The test tables of go-gpuallocator (`gpuallocator/besteffort_test.go`,
//! `simple_test.go`, `common_test.go` at commit 876e7b7), names kept, and
//! the bounded search checked against the literal port of the exhaustive
//! one.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::exhaustive::{iterate_partitions, iterate_sets};
use super::*;
use crate::fixtures;

fn ids(indices: &[usize]) -> Vec<String> {
    indices.iter().map(|i| format!("GPU-{i}")).collect()
}

/// upstream's `PolicyAllocTest`.
struct PolicyAllocTest {
    description: &'static str,
    available: &'static [usize],
    required: &'static [usize],
    size: usize,
    result: &'static [usize],
}

/// Runs `tests` through a chooser and checks the result, in order (upstream
/// compares sorted sets; the order here is upstream's too: available order
/// for best-effort, required first for simple).
fn run_policy_alloc_tests(topology: GpuTopology, policy: Policy, tests: &[PolicyAllocTest]) {
    let chooser = Chooser::new(topology, policy);
    let scores = Scores::from_topology(chooser.topology());
    for tc in tests {
        let got = chooser
            .choose(&ids(tc.available), &ids(tc.required), tc.size)
            .unwrap_or_else(|e| panic!("{}: {e}", tc.description));
        assert_eq!(got, ids(tc.result), "{}", tc.description);
        if policy == Policy::BestEffort {
            let oracle = exhaustive::best_effort(&scores, tc.available, tc.required, tc.size);
            assert_eq!(oracle, tc.result, "{} (exhaustive)", tc.description);
        }
    }
}

#[test]
fn test_best_effort_allocate() {
    let tests = [
        PolicyAllocTest {
            description: "Single NVLINK, prefer same switch",
            available: &[0, 2, 4, 5],
            required: &[],
            size: 2,
            result: &[4, 5],
        },
        PolicyAllocTest {
            description: "Single NVLINK, prefer same socket",
            available: &[0, 4, 5, 6],
            required: &[],
            size: 2,
            result: &[5, 6],
        },
        PolicyAllocTest {
            description: "Prefer dual NVLINK same socket",
            available: &[0, 3, 1],
            required: &[],
            size: 2,
            result: &[0, 3],
        },
        PolicyAllocTest {
            description: "Prefer dual NVLINK cross socket",
            available: &[0, 1, 4],
            required: &[],
            size: 2,
            result: &[0, 4],
        },
        PolicyAllocTest {
            description: "Must include with allocation size 1",
            available: &[0, 1, 2, 3, 4, 5, 6, 7],
            required: &[4],
            size: 1,
            result: &[4],
        },
        PolicyAllocTest {
            description: "Must include with allocation size 2",
            available: &[0, 1, 2, 3, 4, 5, 6, 7],
            required: &[4],
            size: 2,
            result: &[4, 7],
        },
        PolicyAllocTest {
            description: "Must include with allocation size 4",
            available: &[0, 1, 2, 3, 4, 5, 6, 7],
            required: &[4],
            size: 4,
            result: &[4, 5, 6, 7],
        },
        PolicyAllocTest {
            description: "Must include with unavailable device",
            available: &[1, 2, 3, 4, 5, 6, 7],
            required: &[0, 1, 2, 3],
            size: 4,
            result: &[],
        },
        PolicyAllocTest {
            description: "Must include with full set specified",
            available: &[0, 1, 2, 3, 4, 5, 6, 7],
            required: &[0, 2, 4, 6],
            size: 4,
            result: &[0, 2, 4, 6],
        },
        PolicyAllocTest {
            description: "Must include with too many devices specified",
            available: &[0, 1, 2, 3, 4, 5, 6, 7],
            required: &[1, 2, 3, 4, 5, 6],
            size: 4,
            result: &[],
        },
        PolicyAllocTest {
            description: "Required too many devices than available",
            available: &[1, 2, 3, 4, 5],
            required: &[1, 2, 3, 4, 5, 6],
            size: 1,
            result: &[],
        },
    ];
    run_policy_alloc_tests(fixtures::dgx1_volta(), Policy::BestEffort, &tests);
}

#[test]
fn test_simple_allocate() {
    let all: &[usize] = &[0, 1, 2, 3, 4, 5, 6, 7];
    let mut tests: Vec<PolicyAllocTest> = [
        ("Allocate 1", 1, &[0][..]),
        ("Allocate 2", 2, &[0, 1]),
        ("Allocate 3", 3, &[0, 1, 2]),
        ("Allocate 4", 4, &[0, 1, 2, 3]),
        ("Allocate 5", 5, &[0, 1, 2, 3, 4]),
        ("Allocate 6", 6, &[0, 1, 2, 3, 4, 5]),
        ("Allocate 7", 7, &[0, 1, 2, 3, 4, 5, 6]),
        ("Allocate 8", 8, &[0, 1, 2, 3, 4, 5, 6, 7]),
    ]
    .into_iter()
    .map(|(description, size, result)| PolicyAllocTest {
        description,
        available: all,
        required: &[],
        size,
        result,
    })
    .collect();
    tests.extend([
        PolicyAllocTest {
            description: "Must include with allocation size 1",
            available: all,
            required: &[4],
            size: 1,
            result: &[4],
        },
        PolicyAllocTest {
            description: "Must include with allocation size 2",
            available: all,
            required: &[4],
            size: 2,
            result: &[4, 0],
        },
        PolicyAllocTest {
            description: "Must include with allocation size 4",
            available: all,
            required: &[4],
            size: 4,
            result: &[4, 0, 1, 2],
        },
        PolicyAllocTest {
            description: "Must include with unavailable device",
            available: &[1, 2, 3, 4, 5, 6, 7],
            required: &[0, 1, 2, 3],
            size: 4,
            result: &[],
        },
        PolicyAllocTest {
            description: "Must include with full set specified",
            available: all,
            required: &[0, 2, 4, 6],
            size: 4,
            result: &[0, 2, 4, 6],
        },
        PolicyAllocTest {
            description: "Must include with too many devices specified",
            available: all,
            required: &[1, 2, 3, 4, 5, 6],
            size: 4,
            result: &[],
        },
    ]);
    run_policy_alloc_tests(fixtures::dgx1_volta(), Policy::Simple, &tests);
}

#[test]
fn simple_sorts_the_rest_by_index_not_by_available_order() {
    assert_eq!(simple(&[5, 3, 7, 1], &[7], 3), [7, 1, 3]);
    assert_eq!(simple(&[5, 3], &[], 0), Vec::<usize>::new());
    assert_eq!(simple(&[5, 3], &[], 3), Vec::<usize>::new());
}

/// upstream's `Allocator` (`allocator.go`): each allocation takes `num`
/// GPUs from the remaining ones, sorted by index, with no required GPUs.
struct Allocator {
    scores: Scores,
    remaining: BTreeSet<usize>,
}

impl Allocator {
    fn new(topology: &GpuTopology) -> Self {
        Allocator {
            scores: Scores::from_topology(topology),
            remaining: (0..topology.len()).collect(),
        }
    }

    fn allocate(&mut self, num: usize) -> Vec<usize> {
        let available: Vec<usize> = self.remaining.iter().copied().collect();
        let devices = besteffort::best_effort(&self.scores, &available, &[], num);
        let oracle = exhaustive::best_effort(&self.scores, &available, &[], num);
        assert_eq!(
            devices, oracle,
            "bounded search and exhaustive search differ"
        );
        for d in &devices {
            assert!(self.remaining.remove(d), "GPU {d} allocated twice");
        }
        devices
    }
}

/// upstream's `RunAllocTests`: `(size, result)` in sequence, results
/// compared as sets.
fn run_alloc_tests(topology: &GpuTopology, tests: &[(usize, &[usize])]) {
    let mut allocator = Allocator::new(topology);
    for (step, &(size, result)) in tests.iter().enumerate() {
        let mut got = allocator.allocate(size);
        got.sort_unstable();
        assert_eq!(got, result, "step {step}: allocate {size}");
    }
}

#[test]
fn test_best_effort_4x_rtx8000_gpu_alloc_one() {
    run_alloc_tests(
        &fixtures::rtx8000_x4(),
        &[(1, &[0]), (1, &[1]), (1, &[2]), (1, &[3]), (1, &[])],
    );
}

#[test]
fn test_best_effort_4x_rtx8000_gpu_alloc_two() {
    run_alloc_tests(
        &fixtures::rtx8000_x4(),
        &[(2, &[0, 3]), (2, &[1, 2]), (1, &[])],
    );
}

#[test]
fn test_best_effort_4x_rtx8000_gpu_alloc_four() {
    run_alloc_tests(&fixtures::rtx8000_x4(), &[(4, &[0, 1, 2, 3]), (1, &[])]);
}

const ALLOC_ONE_OF_EIGHT: &[(usize, &[usize])] = &[
    (1, &[0]),
    (1, &[1]),
    (1, &[2]),
    (1, &[3]),
    (1, &[4]),
    (1, &[5]),
    (1, &[6]),
    (1, &[7]),
    (1, &[]),
];

#[test]
fn test_best_effort_dgx1_pascal_gpu_alloc_one() {
    run_alloc_tests(&fixtures::dgx1_pascal(), ALLOC_ONE_OF_EIGHT);
}

#[test]
fn test_best_effort_dgx1_pascal_gpu_alloc_two() {
    run_alloc_tests(
        &fixtures::dgx1_pascal(),
        &[
            (2, &[0, 2]),
            (2, &[1, 3]),
            (2, &[4, 6]),
            (2, &[5, 7]),
            (1, &[]),
        ],
    );
}

#[test]
fn test_best_effort_dgx1_pascal_gpu_alloc_four() {
    run_alloc_tests(
        &fixtures::dgx1_pascal(),
        &[(4, &[0, 1, 2, 3]), (4, &[4, 5, 6, 7]), (1, &[])],
    );
}

#[test]
fn test_best_effort_dgx1_pascal_gpu_alloc_eight() {
    run_alloc_tests(
        &fixtures::dgx1_pascal(),
        &[(8, &[0, 1, 2, 3, 4, 5, 6, 7]), (1, &[])],
    );
}

#[test]
fn test_best_effort_dgx1_volta_gpu_alloc_one() {
    run_alloc_tests(&fixtures::dgx1_volta(), ALLOC_ONE_OF_EIGHT);
}

#[test]
fn test_best_effort_dgx1_volta_gpu_alloc_two() {
    run_alloc_tests(
        &fixtures::dgx1_volta(),
        &[
            (2, &[0, 3]),
            (2, &[1, 2]),
            (2, &[4, 7]),
            (2, &[5, 6]),
            (1, &[]),
        ],
    );
}

#[test]
fn test_best_effort_dgx1_volta_gpu_alloc_four() {
    run_alloc_tests(
        &fixtures::dgx1_volta(),
        &[(4, &[0, 1, 2, 3]), (4, &[4, 5, 6, 7]), (1, &[])],
    );
}

#[test]
fn test_best_effort_dgx1_volta_gpu_alloc_eight() {
    run_alloc_tests(
        &fixtures::dgx1_volta(),
        &[(8, &[0, 1, 2, 3, 4, 5, 6, 7]), (1, &[])],
    );
}

fn collect_sets(input: &[usize], size: usize) -> Vec<Vec<usize>> {
    let slots: Vec<Option<usize>> = input.iter().copied().map(Some).collect();
    let mut out = Vec::new();
    iterate_sets(&slots, size, &mut |set| {
        out.push(set.iter().map(|s| s.unwrap_or(usize::MAX)).collect());
    });
    out
}

#[test]
fn test_best_effort_iterate_gpu_sets() {
    let input = [0, 1, 2, 3];
    let tests: [(&str, usize, Vec<Vec<usize>>); 6] = [
        ("Iterate 0", 0, vec![]),
        ("Iterate 1", 1, vec![vec![0], vec![1], vec![2], vec![3]]),
        (
            "Iterate 2",
            2,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3],
            ],
        ),
        (
            "Iterate 3",
            3,
            vec![vec![0, 1, 2], vec![0, 1, 3], vec![0, 2, 3], vec![1, 2, 3]],
        ),
        ("Iterate 4", 4, vec![vec![0, 1, 2, 3]]),
        ("Iterate Too Many", 5, vec![]),
    ];
    for (description, size, result) in tests {
        assert_eq!(collect_sets(&input, size), result, "{description}");
    }
}

/// `pad` in upstream's tables.
const PAD: usize = usize::MAX;

fn collect_partitions(input: &[usize], size: usize) -> Vec<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    iterate_partitions(input, size, &mut |partition| {
        out.push(
            partition
                .iter()
                .map(|set| set.iter().map(|s| s.unwrap_or(PAD)).collect())
                .collect(),
        );
    });
    out
}

/// Sets sorted (padding first, as upstream's `sortGPUSet`), partitions
/// sorted: upstream compares its partition tables this way.
fn normalized(mut partitions: Vec<Vec<Vec<usize>>>) -> Vec<Vec<Vec<usize>>> {
    for p in &mut partitions {
        for set in p.iter_mut() {
            set.sort_by_key(|&d| (d != PAD, d));
        }
        p.sort();
    }
    partitions.sort();
    partitions
}

#[test]
fn test_best_effort_iterate_gpu_partitions() {
    let input = [0, 1, 2, 3];
    type Partitions = Vec<Vec<Vec<usize>>>;
    let tests: [(&str, usize, Partitions); 6] = [
        ("Iterate 0", 0, vec![]),
        (
            "Iterate 1",
            1,
            vec![vec![vec![0]], vec![vec![1]], vec![vec![2]], vec![vec![3]]],
        ),
        (
            "Iterate 2",
            2,
            vec![
                vec![vec![0, 1], vec![2, 3]],
                vec![vec![0, 2], vec![1, 3]],
                vec![vec![0, 3], vec![1, 2]],
            ],
        ),
        (
            "Iterate 3",
            3,
            vec![
                vec![vec![0, 1, 2], vec![3, PAD, PAD]],
                vec![vec![0, 1, 3], vec![2, PAD, PAD]],
                vec![vec![0, 2, 3], vec![1, PAD, PAD]],
                vec![vec![1, 2, 3], vec![0, PAD, PAD]],
            ],
        ),
        ("Iterate 4", 4, vec![vec![vec![0, 1, 2, 3]]]),
        ("Iterate Too Many", 5, vec![]),
    ];
    for (description, size, result) in tests {
        assert_eq!(
            normalized(collect_partitions(&input, size)),
            normalized(result),
            "{description}"
        );
    }
    // The order itself: the set holding the first slot grows in
    // combination order, the padding after every GPU.
    assert_eq!(
        collect_partitions(&input, 3),
        [
            vec![vec![0, 1, 2], vec![3, PAD, PAD]],
            vec![vec![0, 1, 3], vec![2, PAD, PAD]],
            vec![vec![0, 2, 3], vec![1, PAD, PAD]],
            vec![vec![0, PAD, PAD], vec![1, 2, 3]],
        ]
    );
}

#[test]
fn padded_sets_are_never_returned() {
    // upstream PR #80's case: of five GPUs, an NVLink pair outscores every
    // three-GPU set, so the winning partition's best set is the padded
    // {3, 4, nil}; upstream returns it (two GPUs and a nil).
    let topology = fixtures::from_links(
        5,
        &[
            (0, 1, "PIX"),
            (0, 2, "PIX"),
            (1, 2, "PIX"),
            (3, 4, "NV12"),
            (0, 3, "SYS"),
            (0, 4, "SYS"),
            (1, 3, "SYS"),
            (1, 4, "SYS"),
            (2, 3, "SYS"),
            (2, 4, "SYS"),
        ],
    );
    let scores = Scores::from_topology(&topology);
    let all = [0, 1, 2, 3, 4];
    // The winning partition is {0,1,2} + {3,4,pad} (150 + 1200).
    let mut best: Option<(Vec<Vec<Option<usize>>>, i64)> = None;
    iterate_partitions(&all, 3, &mut |p| {
        let s: i64 = p
            .iter()
            .map(|set| exhaustive::set_score(&scores, set))
            .sum();
        if best.as_ref().is_none_or(|(_, b)| s > *b) {
            best = Some((p.to_vec(), s));
        }
    });
    let (partition, score) = best.unwrap();
    assert_eq!(score, 1350);
    assert_eq!(
        partition,
        [
            vec![Some(0), Some(1), Some(2)],
            vec![Some(3), Some(4), None]
        ]
    );
    // ... and the choice is its complete set.
    assert_eq!(besteffort::best_effort(&scores, &all, &[], 3), [0, 1, 2]);
    assert_eq!(exhaustive::best_effort(&scores, &all, &[], 3), [0, 1, 2]);
    // With GPU 4 required, its set must be complete: {0,1,pad} + {2,3,4}
    // is the first partition scoring 1270 (before {0,3,4} + {1,2,pad}).
    let with_required = besteffort::best_effort(&scores, &all, &[4], 3);
    assert_eq!(
        with_required,
        exhaustive::best_effort(&scores, &all, &[4], 3)
    );
    assert_eq!(with_required, [2, 3, 4]);
}

#[test]
fn results_follow_the_order_of_available() {
    // All pairs equal (NVSwitch as nvidia-smi shows it): every partition
    // ties, so the first valid one in upstream's order wins: the first
    // `size` of `available`, in that order; with GPU 4 required, the set
    // holding it must leave a valid rest: {5,2,7} + {0,1,4} + {3,6,pad}.
    let links: Vec<(usize, usize, &str)> = (0..8)
        .flat_map(|a| (a + 1..8).map(move |b| (a, b, "NV12")))
        .collect();
    let chooser = Chooser::new(fixtures::from_links(8, &links), Policy::BestEffort);
    let available = ids(&[5, 2, 7, 0, 1, 3, 4, 6]);
    let none: [String; 0] = [];
    assert_eq!(
        chooser.choose(&available, &none, 3).unwrap(),
        ids(&[5, 2, 7])
    );
    assert_eq!(
        chooser.choose(&available, &ids(&[4]), 3).unwrap(),
        ids(&[0, 1, 4])
    );
}

/// upstream's `TestDeviceListFilter` (device_test.go): no ids, no devices.
#[test]
fn test_device_list_filter() {
    let chooser = Chooser::new(fixtures::rtx8000_x4(), Policy::BestEffort);
    let none: [&str; 0] = [];
    assert_eq!(
        chooser.choose(&none, &none, 0).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        chooser.choose(&none, &none, 1).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn unknown_and_repeated_ids_are_refused() {
    let chooser = Chooser::new(fixtures::rtx8000_x4(), Policy::BestEffort);
    let none: [&str; 0] = [];
    assert_eq!(
        chooser
            .choose(&["GPU-0", "GPU-9"], &none, 1)
            .unwrap_err()
            .to_string(),
        "available device `GPU-9` is not a GPU of this machine"
    );
    assert_eq!(
        chooser
            .choose(&["GPU-0"], &["GPU-7"], 1)
            .unwrap_err()
            .to_string(),
        "must-include device `GPU-7` is not a GPU of this machine"
    );
    assert_eq!(
        chooser
            .choose(&["GPU-0", "GPU-0"], &none, 1)
            .unwrap_err()
            .to_string(),
        "available device `GPU-0` is listed twice"
    );
    assert_eq!(
        chooser
            .choose(&["GPU-0", "GPU-1"], &["GPU-1", "GPU-1"], 2)
            .unwrap_err()
            .to_string(),
        "must-include device `GPU-1` is listed twice"
    );
}

#[test]
fn every_size_and_order_on_the_dgx1_fixtures_matches_the_exhaustive_search() {
    let orders: [&[usize]; 3] = [
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[7, 6, 5, 4, 3, 2, 1, 0],
        &[3, 6, 0, 5, 2, 7, 4, 1],
    ];
    for topology in [fixtures::dgx1_pascal(), fixtures::dgx1_volta()] {
        let scores = Scores::from_topology(&topology);
        for available in orders {
            for size in 0..=9 {
                for required in [&[][..], &[available[3]], &[available[1], available[6]]] {
                    assert_eq!(
                        besteffort::best_effort(&scores, available, required, size),
                        exhaustive::best_effort(&scores, available, required, size),
                        "available {available:?} required {required:?} size {size}"
                    );
                }
            }
        }
    }
}

#[test]
fn more_classes_than_a_key_holds_falls_back_to_greedy() {
    // 70 GPUs, all pair scores distinct: no twins, 2^70 remainders.
    let scores = Scores::from_fn(70, |a, b| (a.min(b) * 70 + a.max(b)) as i64);
    let available: Vec<usize> = (0..70).collect();
    let chosen = besteffort::best_effort(&scores, &available, &[3], 3);
    assert_eq!(chosen.len(), 3);
    assert!(chosen.contains(&3));
}

/// Every size (1 and 11 pad nothing, the others pad), with and without
/// required GPUs, equals the exhaustive search on 11 GPUs.
fn every_size_matches_the_exhaustive_search(topology: &GpuTopology) {
    let available: Vec<usize> = vec![4, 9, 0, 7, 2, 10, 5, 1, 8, 3, 6];
    let scores = Scores::from_topology(topology);
    for size in 1..=11 {
        for required in [&[][..], &[7], &[2, 3]] {
            assert_eq!(
                besteffort::best_effort(&scores, &available, required, size),
                exhaustive::best_effort(&scores, &available, required, size),
                "size {size} required {required:?}"
            );
        }
    }
}

#[test]
fn eleven_gpus_on_an_nvswitch_every_size_matches_the_exhaustive_search() {
    // NV12 everywhere plus a PCIe tree: every pair ties on NVLink.
    let nvswitch: Vec<(usize, usize, &str)> = (0..11)
        .flat_map(|a| {
            (a + 1..11).flat_map(move |b| {
                let level = if a / 2 == b / 2 {
                    "PIX"
                } else if a / 6 == b / 6 {
                    "NODE"
                } else {
                    "SYS"
                };
                [(a, b, "NV12"), (a, b, level)]
            })
        })
        .collect();
    every_size_matches_the_exhaustive_search(&fixtures::from_links(11, &nvswitch));
}

/// A topology of `n` GPUs with few distinct labels, so that ties are
/// common: per pair SYS, NODE or PIX, and NV1 or NV2 for a third of the
/// pairs.
fn tied_topology(n: usize) -> impl Strategy<Value = GpuTopology> {
    let pair = (
        prop_oneof![Just("SYS"), Just("NODE"), Just("PIX")],
        prop_oneof![2 => Just(None), 1 => prop_oneof![Just(Some("NV1")), Just(Some("NV2"))]],
    );
    proptest::collection::vec(pair, n * (n - 1) / 2).prop_map(move |labels| {
        let mut links = Vec::new();
        let mut it = labels.into_iter();
        for a in 0..n {
            for b in a + 1..n {
                let (pcie, nvlink) = it.next().unwrap_or(("SYS", None));
                links.push((a, b, pcie));
                if let Some(nv) = nvlink {
                    links.push((a, b, nv));
                }
            }
        }
        fixtures::from_links(n, &links)
    })
}

proptest! {
    // Each case runs the exhaustive search tens of times on 11-12 GPUs.
    #![proptest_config(ProptestConfig::with_cases(3))]

    #[test]
    fn eleven_gpus_every_size_match_the_exhaustive_search(topology in tied_topology(11)) {
        every_size_matches_the_exhaustive_search(&topology);
    }
}

proptest! {
    // The exhaustive search over 14 GPUs takes seconds: one topology a run.
    #![proptest_config(ProptestConfig::with_cases(1))]

    #[test]
    fn partitions_of_seven_sets_match_the_exhaustive_search(topology in tied_topology(14)) {
        // 14 GPUs in pairs: upstream's aliasing would corrupt this search.
        let scores = Scores::from_topology(&topology);
        let available: Vec<usize> = (0..14).rev().collect();
        for required in [&[][..], &[3], &[5, 8]] {
            let fast = besteffort::best_effort(&scores, &available, required, 2);
            prop_assert_eq!(
                &fast,
                &exhaustive::best_effort(&scores, &available, required, 2)
            );
            prop_assert_eq!(fast.len(), 2);
        }
    }

    #[test]
    fn past_the_work_limit_the_choice_is_greedy_and_complete(topology in tied_topology(12)) {
        let scores = Scores::from_topology(&topology);
        let available: Vec<usize> = (0..12).collect();
        let exact = besteffort::best_effort(&scores, &available, &[], 4);
        prop_assert_eq!(exact, exhaustive::best_effort(&scores, &available, &[], 4));
        for required in [&[][..], &[5], &[2, 9]] {
            let greedy = besteffort::best_effort_within(&scores, &available, required, 4, 10);
            prop_assert_eq!(greedy.len(), 4, "{:?}", required);
            prop_assert!(required.iter().all(|r| greedy.contains(r)), "{:?}", required);
            prop_assert!(greedy.windows(2).all(|w| w[0] < w[1]), "available order");
        }
    }
}

/// A random topology: per pair a PCIe level (or none) and 0-2 NVLinks, from
/// small alphabets so ties and twins are common.
fn topology_strategy(max_gpus: usize) -> impl Strategy<Value = Scores> {
    (1..=max_gpus).prop_flat_map(|n| {
        let pairs = n * (n - 1) / 2;
        (
            Just(n),
            proptest::collection::vec((0u8..4, prop_oneof![3 => Just(0u8), 1 => 1u8..3]), pairs),
        )
            .prop_map(|(n, labels)| {
                let mut w = vec![0i64; n * n];
                let mut it = labels.into_iter();
                for a in 0..n {
                    for b in a + 1..n {
                        let (pcie, nv) = it.next().unwrap_or((0, 0));
                        let s = [0, 10, 20, 50][usize::from(pcie)] + 100 * i64::from(nv);
                        w[a * n + b] = s;
                        w[b * n + a] = s;
                    }
                }
                Scores::from_fn(n, |a, b| w[a * n + b])
            })
    })
}

/// A choice problem: an order of a subset of the GPUs, required GPUs
/// (occasionally one that is not available), a size.
fn problem_strategy() -> impl Strategy<Value = (Scores, Vec<usize>, Vec<usize>, usize)> {
    topology_strategy(10).prop_flat_map(|scores| {
        let n = scores.len();
        (
            Just(scores),
            Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
            1..=n,
            0..=n + 1,
            proptest::collection::vec(0..n, 0..3),
        )
            .prop_map(|(scores, order, count, size, required)| {
                let available: Vec<usize> = order[..count].to_vec();
                let mut req: Vec<usize> = Vec::new();
                for r in required {
                    if !req.contains(&r) {
                        req.push(r);
                    }
                }
                (scores, available, req, size)
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn bounded_search_equals_exhaustive_search(
        (scores, available, required, size) in problem_strategy()
    ) {
        let fast = besteffort::best_effort(&scores, &available, &required, size);
        let oracle = exhaustive::best_effort(&scores, &available, &required, size);
        prop_assert_eq!(&fast, &oracle);
        let feasible = size > 0
            && size <= available.len()
            && required.len() <= size
            && required.iter().all(|r| available.contains(r));
        prop_assert_eq!(fast.len(), if feasible { size } else { 0 });
    }
}
