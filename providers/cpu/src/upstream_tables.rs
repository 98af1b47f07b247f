//! The kubelet's own test tables for the CPU assignment
//! (`pkg/kubelet/cm/cpumanager/cpu_assignment_test.go`), case names kept,
//! with the topology fixtures they use (`policy_test.go`).
//!
//! Fixtures: the kubelet's test topologies give `CoreID`s freely; the SDK's
//! `Cpu::core` carries them as given (real discovery names a core by its
//! lowest CPU id, as the kubelet does). The fixtures whose definitions were
//! not available verbatim are rebuilt from what the tables and the
//! upstream comments state about them: `fakeTopoMultiSocketDualSocketPerNumaHT`
//! (from its free-socket/NUMA tables) and the `topoUncore*` machines (from
//! the resize tables' comments). `topoTripleSocketHT` has no NUMA ids
//! upstream (all node 0). Fixtures without uncore cache ids upstream have
//! them all 0 (Go's zero value): one cache for the whole machine.
//!
//! Tables not ported, and why:
//! * `TestCPUAccumulatorTake` (6 cases) checks the accumulator's private
//!   bookkeeping after hand-fed takes; its observable effects are covered
//!   by the take tables.
//! * `TestTakeByTopologyNUMAPackedForResize`,
//!   `TestTakeByTopologyNUMADistributedForResize`: in-place resize of
//!   exclusive CPUs (`InPlacePodVerticalScalingExclusiveCPUs`), which
//!   topomgr does not do (a container's CPUs are fixed until release).
//! * The uncore case "take cpus from partial UncoreCache with partially
//!   available cores" belongs to an unmerged change (kubernetes #137319).

use crate::assignment::{
    free_groups, packed_cpu_order, take_distributed, take_packed, Distribution, SortingStrategy,
};
use crate::testmachines::{finish, layered};
use crate::topology::{to_cpuset, CpuTopology, Cpus, Level};
use topomgr_sdk::{Cpu, CpuSet};

pub(crate) fn cpu(id: u32, core: u32, socket: u32, numa: u32, l3: u32) -> Cpu {
    crate::testmachines::cpu_l3(id, socket, core, numa, l3)
}

pub(crate) fn topo(cpus: Vec<Cpu>) -> CpuTopology {
    let nodes = cpus
        .iter()
        .filter_map(|c| c.numa)
        .map(|n| n.get() + 1)
        .max()
        .unwrap_or(1);
    CpuTopology::from_machine(&finish(cpus, nodes))
}

/// `topoSingleSocketHT`: 8 CPUs, core k = CPUs k, k+4.
pub(crate) fn single_socket_ht() -> CpuTopology {
    topo((0..8).map(|i| cpu(i, i % 4, 0, 0, 0)).collect())
}

/// `topoDualSocketHT`: 12 CPUs, socket = NUMA = id % 2, core = id % 6.
pub(crate) fn dual_socket_ht() -> CpuTopology {
    topo((0..12).map(|i| cpu(i, i % 6, i % 2, i % 2, 0)).collect())
}

/// `topoDualSocketNoHT`: 8 CPUs, socket = NUMA = id / 4.
pub(crate) fn dual_socket_no_ht() -> CpuTopology {
    topo((0..8).map(|i| cpu(i, i, i / 4, i / 4, 0)).collect())
}

/// `topoTripleSocketHT`: 18 CPUs, core = id / 2; sockets 1, 0, 2 hold
/// CPUs 0-5, 6-11, 12-17; no NUMA ids.
fn triple_socket_ht() -> CpuTopology {
    topo(
        (0..18)
            .map(|i| cpu(i, i / 2, [1, 0, 2][i as usize / 6], 0, 0))
            .collect(),
    )
}

/// `topoDualSocketMultiNumaPerSocketHT`: 80 CPUs, 2 sockets, 4 NUMA nodes
/// (CPUs 0-9,40-49 / 10-19,50-59 / 20-29,60-69 / 30-39,70-79).
pub(crate) fn dual_socket_multi_numa_ht() -> CpuTopology {
    CpuTopology::from_machine(&layered(2, 2, 10, 2))
}

/// `topoDualSocketMultiNumaPerSocketHTLarge`: 256 CPUs, 2 sockets, 8 NUMA
/// nodes of 16 cores, core i = CPUs i, i+128.
fn dual_socket_multi_numa_ht_large() -> CpuTopology {
    CpuTopology::from_machine(&layered(2, 4, 16, 2))
}

/// `fakeTopoMultiSocketDualSocketPerNumaHT`: 80 CPUs, 2 NUMA nodes of two
/// sockets each; socket s = CPUs 10s..10s+9 and 40+10s..49+10s, NUMA node
/// s / 2, core i = CPUs i, i+40.
pub(crate) fn multi_socket_dual_socket_per_numa_ht() -> CpuTopology {
    topo(
        (0..80)
            .map(|i| {
                let s = (i % 40) / 10;
                cpu(i, i % 40, s, s / 2, s / 2)
            })
            .collect(),
    )
}

/// `topoUncoreSingleSocketNoSMT`: 16 CPUs, uncore cache k = CPUs 4k..4k+3.
fn uncore_single_socket_no_smt() -> CpuTopology {
    topo((0..16).map(|i| cpu(i, i, 0, 0, i / 4)).collect())
}

/// `topoUncoreDualSocketNoSMT`: 16 CPUs, one NUMA node, socket = id / 8,
/// uncore cache k = CPUs 4k..4k+3.
fn uncore_dual_socket_no_smt() -> CpuTopology {
    topo((0..16).map(|i| cpu(i, i, i / 8, 0, i / 4)).collect())
}

/// `topoUncoreSingleSocketMultiNuma`: 16 CPUs, NUMA node = id / 8, uncore
/// cache k = CPUs 4k..4k+3.
fn uncore_single_socket_multi_numa() -> CpuTopology {
    topo((0..16).map(|i| cpu(i, i, 0, i / 8, i / 4)).collect())
}

/// `topoUncoreSingleSocketSMT`: 16 CPUs, core k = CPUs k, k+8, uncore
/// cache 0 = cores 0-3, cache 1 = cores 4-7.
fn uncore_single_socket_smt() -> CpuTopology {
    topo((0..16).map(|i| cpu(i, i % 8, 0, 0, (i % 8) / 4)).collect())
}

/// `topoQuadSocketFourWayHT` (KNL SNC4): 288 CPUs, 4 sockets = 4 NUMA
/// nodes, 72 cores of 4 threads; per socket, (core id, its CPUs).
const QUAD: [&[(u32, [u32; 4])]; 4] = [
    // Socket 0 (NUMA node 0).
    &[
        (0, [0, 169, 109, 229]),
        (1, [50, 170, 110, 230]),
        (64, [1, 25, 13, 38]),
        (65, [2, 26, 14, 39]),
        (72, [9, 33, 21, 46]),
        (73, [10, 34, 22, 47]),
        (8, [57, 177, 117, 237]),
        (9, [58, 178, 118, 238]),
        (24, [71, 191, 131, 251]),
        (25, [72, 192, 132, 252]),
        (32, [79, 199, 139, 259]),
        (33, [80, 200, 140, 260]),
        (40, [87, 207, 147, 267]),
        (41, [88, 208, 148, 268]),
        (48, [95, 215, 155, 275]),
        (49, [96, 216, 156, 276]),
        (56, [103, 223, 163, 283]),
        (57, [104, 224, 164, 284]),
    ],
    // Socket 1 (NUMA node 1).
    &[
        (66, [3, 27, 15, 40]),
        (67, [4, 28, 16, 41]),
        (74, [11, 35, 23, 48]),
        (75, [12, 36, 24, 49]),
        (2, [51, 171, 111, 231]),
        (3, [52, 172, 112, 232]),
        (10, [59, 179, 119, 239]),
        (11, [60, 180, 120, 240]),
        (18, [65, 185, 125, 245]),
        (19, [66, 186, 126, 246]),
        (26, [73, 193, 133, 253]),
        (27, [74, 194, 134, 254]),
        (34, [81, 201, 141, 261]),
        (35, [82, 202, 142, 262]),
        (42, [89, 209, 149, 269]),
        (43, [90, 210, 150, 270]),
        (50, [97, 217, 157, 277]),
        (51, [98, 218, 158, 278]),
    ],
    // Socket 2 (NUMA node 2).
    &[
        (68, [5, 29, 17, 42]),
        (69, [6, 30, 18, 43]),
        (4, [53, 173, 113, 233]),
        (5, [54, 174, 114, 234]),
        (12, [61, 181, 121, 241]),
        (13, [62, 182, 122, 242]),
        (20, [67, 187, 127, 247]),
        (21, [68, 188, 128, 248]),
        (28, [75, 195, 135, 255]),
        (29, [76, 196, 136, 256]),
        (36, [83, 203, 143, 263]),
        (37, [84, 204, 144, 264]),
        (44, [91, 211, 151, 271]),
        (45, [92, 212, 152, 272]),
        (52, [99, 219, 159, 279]),
        (53, [100, 220, 160, 280]),
        (60, [105, 225, 165, 285]),
        (61, [106, 226, 166, 286]),
    ],
    // Socket 3 (NUMA node 3).
    &[
        (70, [7, 31, 19, 44]),
        (71, [8, 32, 20, 45]),
        (63, [37, 168, 108, 228]),
        (62, [107, 227, 167, 287]),
        (6, [55, 175, 115, 235]),
        (7, [56, 176, 116, 236]),
        (14, [63, 183, 123, 243]),
        (15, [64, 184, 124, 244]),
        (22, [69, 189, 129, 249]),
        (23, [70, 190, 130, 250]),
        (30, [77, 197, 137, 257]),
        (31, [78, 198, 138, 258]),
        (38, [85, 205, 145, 265]),
        (39, [86, 206, 146, 266]),
        (46, [93, 213, 153, 273]),
        (47, [94, 214, 154, 274]),
        (54, [101, 221, 161, 281]),
        (55, [102, 222, 162, 282]),
    ],
];

pub(crate) fn quad_socket_four_way_ht() -> CpuTopology {
    let mut cpus = Vec::new();
    for (socket, cores) in QUAD.iter().enumerate() {
        for (core, ids) in cores.iter() {
            for id in ids {
                cpus.push(cpu(*id, *core, socket as u32, socket as u32, 0));
            }
        }
    }
    topo(cpus)
}

pub(crate) fn set(s: &str) -> Cpus {
    CpuSet::parse(s).unwrap().iter().collect()
}

pub(crate) fn show(c: &Cpus) -> String {
    to_cpuset(c).to_string()
}

/// A topology fixture.
type Fixture = fn() -> CpuTopology;
/// (name, topology, available, expected groups)
type FreeCase<'a> = (&'a str, Fixture, &'a str, &'a [u32]);
/// (name, topology, available, CPUs, group size, expected result or error)
type DistCase = (
    &'static str,
    Fixture,
    &'static str,
    usize,
    usize,
    &'static str,
);

fn check_free(level: Level, cases: &[FreeCase<'_>], sorted: bool) {
    for (name, t, avail, want) in cases {
        let mut got = free_groups(&t(), &set(avail), level);
        if sorted {
            got.sort_unstable();
        }
        assert_eq!(got, *want, "{name}");
    }
}

#[test]
fn test_cpu_accumulator_free_sockets() {
    let d = dual_socket_ht as Fixture;
    let m = dual_socket_multi_numa_ht as Fixture;
    let f = multi_socket_dual_socket_per_numa_ht as Fixture;
    check_free(
        Level::Socket,
        &[
            (
                "single socket HT, 1 socket free",
                single_socket_ht,
                "0-7",
                &[0],
            ),
            (
                "single socket HT, 0 sockets free",
                single_socket_ht,
                "1-7",
                &[],
            ),
            ("dual socket HT, 2 sockets free", d, "0-11", &[0, 1]),
            ("dual socket HT, 1 socket free", d, "0-9,11", &[1]),
            ("dual socket HT, 0 sockets free", d, "0,2-9,11", &[]),
            (
                "dual socket, multi numa per socket, HT, 2 sockets free",
                m,
                "0-79",
                &[0, 1],
            ),
            (
                "dual socket, multi numa per socket, HT, 1 sockets free",
                m,
                "1-79",
                &[1],
            ),
            (
                "dual socket, multi numa per socket, HT, 0 sockets free",
                m,
                "1-78",
                &[],
            ),
            (
                "dual numa, multi socket per per socket, HT, 4 sockets free",
                f,
                "0-79",
                &[0, 1, 2, 3],
            ),
            (
                "dual numa, multi socket per per socket, HT, 3 sockets free",
                f,
                "0-19,21-79",
                &[0, 1, 3],
            ),
            (
                "dual numa, multi socket per per socket, HT, 2 sockets free",
                f,
                "0-59,61-78",
                &[0, 1],
            ),
            (
                "dual numa, multi socket per per socket, HT, 1 sockets free",
                f,
                "1-19,21-38,41-60,61-78",
                &[1],
            ),
            (
                "dual numa, multi socket per per socket, HT, 0 sockets free",
                f,
                "0-40,42-49,51-68,71-79",
                &[],
            ),
        ],
        true,
    );
}

#[test]
fn test_cpu_accumulator_free_numa_nodes() {
    let d = dual_socket_ht as Fixture;
    let m = dual_socket_multi_numa_ht as Fixture;
    let f = multi_socket_dual_socket_per_numa_ht as Fixture;
    check_free(
        Level::Numa,
        &[
            (
                "single socket HT, 1 NUMA node free",
                single_socket_ht,
                "0-7",
                &[0],
            ),
            (
                "single socket HT, 0 NUMA Node free",
                single_socket_ht,
                "1-7",
                &[],
            ),
            ("dual socket HT, 2 NUMA Node free", d, "0-11", &[0, 1]),
            ("dual socket HT, 1 NUMA Node free", d, "0-9,11", &[1]),
            ("dual socket HT, 0 NUMA node free", d, "0,2-9,11", &[]),
            (
                "dual socket, multi numa per socket, HT, 4 NUMA Node free",
                m,
                "0-79",
                &[0, 1, 2, 3],
            ),
            (
                "dual socket, multi numa per socket, HT, 3 NUMA node free",
                m,
                "1-79",
                &[1, 2, 3],
            ),
            (
                "dual socket, multi numa per socket, HT, 2 NUMA node free",
                m,
                "1-9,11-79",
                &[2, 3],
            ),
            (
                "dual socket, multi numa per socket, HT, 1 NUMA node free",
                m,
                "1-9,11-59,61-79",
                &[3],
            ),
            (
                "dual socket, multi numa per socket, HT, 0 NUMA node free",
                m,
                "1-9,11-59,61-78",
                &[],
            ),
            (
                "dual numa, multi socket per per socket, HT, 2 NUMA node free",
                f,
                "0-79",
                &[0, 1],
            ),
            (
                "dual numa, multi socket per per socket, HT, 1 NUMA node free",
                f,
                "0-9,11-79",
                &[1],
            ),
            (
                "dual numa, multi socket per per socket, HT, 0 sockets free",
                f,
                "0-9,11-59,61-79",
                &[],
            ),
        ],
        false,
    );
}

#[test]
fn test_cpu_accumulator_free_sockets_and_numa_nodes() {
    let m = dual_socket_multi_numa_ht();
    for (name, avail, sockets, numas) in [
        (
            "dual socket, multi numa per socket, HT, 2 Socket/4 NUMA Node free",
            "0-79",
            &[0, 1][..],
            &[0, 1, 2, 3][..],
        ),
        (
            "dual socket, multi numa per socket, HT, 1 Socket/3 NUMA node free",
            "1-79",
            &[1],
            &[1, 2, 3],
        ),
        (
            "dual socket, multi numa per socket, HT, 1 Socket/ 2 NUMA node free",
            "1-9,11-79",
            &[1],
            &[2, 3],
        ),
        (
            "dual socket, multi numa per socket, HT, 0 Socket/ 2 NUMA node free",
            "1-59,61-79",
            &[],
            &[1, 3],
        ),
    ] {
        assert_eq!(free_groups(&m, &set(avail), Level::Numa), numas, "{name}");
        assert_eq!(
            free_groups(&m, &set(avail), Level::Socket),
            sockets,
            "{name}"
        );
    }
}

#[test]
fn test_cpu_accumulator_free_cores() {
    let s = single_socket_ht as Fixture;
    let d = dual_socket_ht as Fixture;
    check_free(
        Level::Core,
        &[
            ("single socket HT, 4 cores free", s, "0-7", &[0, 1, 2, 3]),
            ("single socket HT, 3 cores free", s, "0-2,4-6", &[0, 1, 2]),
            (
                "single socket HT, 3 cores free (1 partially consumed)",
                s,
                "0-6",
                &[0, 1, 2],
            ),
            ("single socket HT, 0 cores free", s, "", &[]),
            (
                "single socket HT, 0 cores free (4 partially consumed)",
                s,
                "0-3",
                &[],
            ),
            (
                "dual socket HT, 6 cores free",
                d,
                "0-11",
                &[0, 2, 4, 1, 3, 5],
            ),
            (
                "dual socket HT, 5 cores free (1 consumed from socket 0)",
                d,
                "1-5,7-11",
                &[2, 4, 1, 3, 5],
            ),
            (
                "dual socket HT, 4 cores free (1 consumed from each socket)",
                d,
                "2-5,8-11",
                &[2, 4, 3, 5],
            ),
        ],
        false,
    );
}

#[test]
fn test_cpu_accumulator_free_cpus() {
    for (name, t, avail, want) in [
        (
            "single socket HT, 8 cpus free",
            single_socket_ht as Fixture,
            "0-7",
            &[0, 4, 1, 5, 2, 6, 3, 7][..],
        ),
        (
            "single socket HT, 5 cpus free",
            single_socket_ht,
            "3-7",
            &[4, 5, 6, 3, 7],
        ),
        (
            "dual socket HT, 12 cpus free",
            dual_socket_ht,
            "0-11",
            &[0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
        (
            "dual socket HT, 11 cpus free",
            dual_socket_ht,
            "1-11",
            &[6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
        (
            "dual socket HT, 10 cpus free",
            dual_socket_ht,
            "1-5,7-11",
            &[2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
        (
            "triple socket HT, 12 cpus free",
            triple_socket_ht,
            "0-3,6-13",
            &[12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11],
        ),
    ] {
        assert_eq!(packed_cpu_order(&t(), &set(avail)), want, "{name}");
    }
}

/// (name, topology, uncore option, available, CPUs, expected result or error)
type Case = (
    &'static str,
    fn() -> CpuTopology,
    bool,
    &'static str,
    usize,
    &'static str,
);

fn common_take_by_topology_cases() -> Vec<Case> {
    let not_enough = "not enough cpus available to satisfy request: requested=5, available=4";
    vec![
        ("take more cpus than are available from single socket with HT", single_socket_ht, false, "0,2,4,6", 5, not_enough),
        ("take zero cpus from single socket with HT", single_socket_ht, false, "0-7", 0, ""),
        ("take one cpu from single socket with HT", single_socket_ht, false, "0-7", 1, "0"),
        ("take one cpu from single socket with HT, some cpus are taken", single_socket_ht, false, "1,3,5-7", 1, "6"),
        ("take two cpus from single socket with HT", single_socket_ht, false, "0-7", 2, "0,4"),
        ("take all cpus from single socket with HT", single_socket_ht, false, "0-7", 8, "0-7"),
        ("take two cpus from single socket with HT, only one core totally free", single_socket_ht, false, "0-3,6", 2, "2,6"),
        ("take a socket of cpus from dual socket with HT", dual_socket_ht, false, "0-11", 6, "0,2,4,6,8,10"),
        ("take a socket of cpus from dual socket with multi-numa-per-socket with HT", dual_socket_multi_numa_ht, false, "0-79", 40, "0-19,40-59"),
        ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT", dual_socket_multi_numa_ht, false, "0-79", 20, "0-9,40-49"),
        ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken", dual_socket_multi_numa_ht, false, "10-39,50-79", 20, "10-19,50-59"),
        ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT", dual_socket_multi_numa_ht, false, "0-79", 60, "0-29,40-69"),
        ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken", dual_socket_multi_numa_ht, false, "1-39,41-79", 60, "10-39,50-79"),
    ]
}

fn outcome<E: std::fmt::Display>(r: Result<Cpus, E>) -> String {
    match r {
        Ok(c) => show(&c),
        Err(e) => e.to_string(),
    }
}

#[test]
fn test_take_by_topology_numa_packed() {
    let mut cases = common_take_by_topology_cases();
    cases.extend::<Vec<Case>>(vec![
        ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht, false, "1-5,7-11", 1, "2"),
        ("allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second NUMA node", dual_socket_ht, false, "0-11", 8, "0-2,4,6-8,10"),
        ("allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) and 2 coming from the fourth NUMA node", dual_socket_multi_numa_ht, false, "0-79", 64, "0-31,40-71"),
        ("take cpus from two full UncoreCaches and partial from a single UncoreCache", uncore_single_socket_no_smt, true, "1-15", 10, "1-2,4-11"),
        ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht, true, "1-5,7-11", 1, "1"),
        ("take first available UncoreCache from first socket", uncore_dual_socket_no_smt, true, "0-15", 4, "0-3"),
        ("take all available UncoreCache from first socket", uncore_dual_socket_no_smt, true, "2-15", 6, "2-7"),
        ("take first available UncoreCache from second socket", uncore_dual_socket_no_smt, true, "8-15", 4, "8-11"),
        ("take first available UncoreCache from available NUMA", uncore_single_socket_multi_numa, true, "3,4-8,12", 2, "4-5"),
        ("take cpus from best available UncoreCache group of multi uncore cache single socket - SMT enabled", uncore_single_socket_smt, true, "2-3,10-11,4-7,12-15", 6, "4-6,12-14"),
        ("take cpus from multiple UncoreCache of single socket - SMT enabled", uncore_single_socket_smt, true, "1-7,9-15", 10, "1,4-7,9,12-15"),
    ]);
    for (name, t, uncore, avail, n, want) in cases {
        let got = take_packed(&t(), &set(avail), n, SortingStrategy::Packed, uncore);
        assert_eq!(outcome(got), want, "{name}");
    }
}

#[test]
fn test_take_by_topology_with_spread_physical_cpus_preferred_option() {
    for (name, t, avail, n, want) in [
        (
            "take a socket of cpus from single socket with HT, 3 cpus",
            single_socket_ht as Fixture,
            "0-7",
            3,
            "0-2",
        ),
        (
            "take a socket of cpus from dual socket with HT, 2 cpus",
            dual_socket_ht,
            "0-11",
            2,
            "0,2",
        ),
        (
            "take a socket of cpus from dual socket with HT, 3 cpus",
            dual_socket_ht,
            "0-11",
            3,
            "0,2,4",
        ),
        (
            "take a socket of cpus from dual socket with HT, 6 cpus",
            dual_socket_ht,
            "0-11",
            6,
            "0,2,4,6,8,10",
        ),
        (
            "take cpus from dual socket with HT, 8 cpus",
            dual_socket_ht,
            "0-11",
            8,
            "0-4,6,8,10",
        ),
        (
            "take a socket of cpus from dual socket without HT, 2 cpus",
            dual_socket_no_ht,
            "0-7",
            2,
            "0-1",
        ),
        (
            "take a socket of cpus from dual socket with multi numa per socket and HT, 12 cpus",
            dual_socket_multi_numa_ht,
            "0-79",
            8,
            "0-7",
        ),
        // Round robin over the cores of socket 0 in core-id order
        // (kubernetes #140766; before it: 0-2,9-10,13-14,21-22,25-26,33).
        (
            "take a socket of cpus from quad socket four way with HT, 12 cpus",
            quad_socket_four_way_ht,
            "0-287",
            12,
            "0,50,57-58,71-72,79-80,87-88,95-96",
        ),
    ] {
        let got = take_packed(&t(), &set(avail), n, SortingStrategy::Spread, false);
        assert_eq!(outcome(got), want, "{name}");
    }
}

#[test]
fn test_take_by_topology_numa_distributed() {
    let mut cases: Vec<DistCase> = common_take_by_topology_cases()
        .into_iter()
        .map(|(name, t, _, avail, n, want)| (name, t, avail, n, 1, want))
        .collect();
    let m = dual_socket_multi_numa_ht as Fixture;
    cases.extend::<Vec<DistCase>>(vec![
        ("allocate 4 full cores with 2 distributed across each NUMA node", dual_socket_ht, "0-11", 8, 1, "0-3,6-9"),
        ("allocate 32 full cores with 8 distributed across each NUMA node", m, "0-79", 64, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
        ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes", m, "0-79", 48, 1, "0-7,10-17,20-27,40-47,50-57,60-67"),
        ("allocate 24 full cores with 8 distributed across the first 3 NUMA nodes (taking all but 2 from the first NUMA node)", m, "1-29,32-39,41-69,72-79", 48, 1, "1-8,10-17,20-27,41-48,50-57,60-67"),
        ("allocate 24 full cores with 8 distributed across the last 3 NUMA nodes (even though all 8 could be allocated from the first NUMA node)", m, "2-29,31-39,42-69,71-79", 48, 1, "10-17,20-27,31-38,50-57,60-67,71-78"),
        ("allocate 8 full cores with 2 distributed across each NUMA node", m, "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, 1, "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
        ("take one cpu from dual socket with HT - core from Socket 0", dual_socket_ht, "1-5,7-11", 1, 1, "1"),
        ("take one cpu from dual socket with HT - core from Socket 0 - cpuGroupSize 2", dual_socket_ht, "1-5,7-11", 1, 2, "2"),
        ("allocate 13 full cores distributed across the first 2 NUMA nodes", m, "0-79", 26, 1, "0-6,10-16,40-45,50-55"),
        ("allocate 13 full cores distributed across the first 2 NUMA nodes (cpuGroupSize 2)", m, "0-79", 26, 2, "0-6,10-15,40-46,50-55"),
        ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 0, 1", m, "0-79", 62, 1, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
        ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 1, 2 (cpuGroupSize 2)", m, "0-79", 62, 2, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
        ("allocate 31 full cores with 15 CPUs distributed across each NUMA node and 1 CPU spilling over to each of NUMA 2, 3 (to keep balance)", m, "0-8,10-18,20-39,40-48,50-58,60-79", 62, 1, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
        ("allocate 31 full cores with 14 CPUs distributed across each NUMA node and 2 CPUs spilling over to each of NUMA 0, 2, 3 (to keep balance with cpuGroupSize 2)", m, "0-8,10-18,20-39,40-48,50-58,60-79", 62, 2, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
        ("ensure bestRemainder chosen with NUMA nodes that have enough CPUs to satisfy the request", m, "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, 1, "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
        ("ensure previous failure encountered on live machine has been fixed (1/1)", dual_socket_multi_numa_ht_large, "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255", 28, 1, "43-47,75-79,96,101-105,171-174,203-206,229-232"),
    ]);
    for (name, t, avail, n, group, want) in cases {
        let got = take_distributed(
            &t(),
            &set(avail),
            n,
            Distribution::groups_of(group),
            SortingStrategy::Packed,
        );
        assert_eq!(outcome(got), want, "{name}");
    }
}
