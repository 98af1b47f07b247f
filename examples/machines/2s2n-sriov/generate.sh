#!/usr/bin/env bash
# Regenerates examples/machines/2s2n-sriov/sys: a hand-made sysfs tree of a
# 2-socket DPDK/telco box with SR-IOV NICs on both NUMA nodes, for
# `topomgr topology --sysfs-root examples/machines/2s2n-sriov/sys`, the SR-IOV
# provider's example (examples/sriov/) and the tests. Edit this script, not
# the tree (see README.md beside it for what it holds).
#
# All links are relative, so the tree works wherever it is checked out.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sys="$here/sys"
rm -rf "$sys" "$here/proc"
mkdir -p "$sys"

put() { # put FILE LINE...: write one attribute file
    mkdir -p "$(dirname "$1")"
    local f="$1"
    shift
    printf '%s\n' "$@" >"$f"
}
link() { # link TARGET NAME: relative symlink NAME -> TARGET
    mkdir -p "$(dirname "$2")"
    ln -sfn "$1" "$2"
}
mask() { # mask CPU...: the kernel's hex CPU mask of 16 CPUs
    local m=0 c
    for c in "$@"; do m=$((m | (1 << c))); done
    printf '%04x' "$m"
}

# Node n (= socket n) holds cores 4n..4n+3; core c has threads c and c+8.
node_cpus() { echo $((4 * $1)) $((4 * $1 + 1)) $((4 * $1 + 2)) $((4 * $1 + 3)) \
    $((4 * $1 + 8)) $((4 * $1 + 9)) $((4 * $1 + 10)) $((4 * $1 + 11)); }
node_list() { echo "$((4 * $1))-$((4 * $1 + 3)),$((4 * $1 + 8))-$((4 * $1 + 11))"; }

# ---------------------------------------------------------------- NUMA nodes
nroot="$sys/devices/system/node"
for f in online possible has_cpu has_memory has_normal_memory; do put "$nroot/$f" "0-1"; done
distances=("10 21" "21 10")
mem_free_kb=(14680064 15728640)
for n in 0 1; do
    d="$nroot/node$n"
    # shellcheck disable=SC2046
    put "$d/cpumap" "$(mask $(node_cpus $n))"
    put "$d/cpulist" "$(node_list $n)"
    put "$d/distance" "${distances[$n]}"
    total=16777216
    free=${mem_free_kb[$n]}
    put "$d/meminfo" \
        "Node $n MemTotal:       $total kB" \
        "Node $n MemFree:        $free kB" \
        "Node $n MemUsed:        $((total - free)) kB" \
        "Node $n HugePages_Total:  1024" \
        "Node $n HugePages_Free:   1024" \
        "Node $n HugePages_Surp:      0"
    for size in 2048kB:1024 1048576kB:8; do
        h="$d/hugepages/hugepages-${size%%:*}"
        put "$h/nr_hugepages" "${size##*:}"
        put "$h/free_hugepages" "${size##*:}"
        put "$h/surplus_hugepages" "0"
    done
    for c in $(node_cpus $n); do link "../../cpu/cpu$c" "$d/cpu$c"; done
done

# ---------------------------------------------------------------------- CPUs
croot="$sys/devices/system/cpu"
for f in online possible present; do put "$croot/$f" "0-15"; done
put "$croot/offline" ""
for c in $(seq 0 15); do
    d="$croot/cpu$c"
    core=$((c % 8))
    node=$((core / 4))
    pkg="$(node_list $node)"
    # shellcheck disable=SC2046
    pkgmask="$(mask $(node_cpus $node))"
    if [ "$c" -ne 0 ]; then put "$d/online" "1"; fi
    link "../../node/node$node" "$d/node$node"
    t="$d/topology"
    put "$t/physical_package_id" "$node"
    put "$t/die_id" "0"
    put "$t/core_id" "$((core % 4))"
    for f in core_cpus thread_siblings; do
        put "$t/${f}_list" "$core,$((core + 8))"
        put "$t/$f" "$(mask $core $((core + 8)))"
    done
    for f in core_siblings package_cpus die_cpus; do
        put "$t/${f}_list" "$pkg"
        put "$t/$f" "$pkgmask"
    done
    i=0
    for spec in "1 Data 48K $core" "1 Instruction 32K $core" "2 Unified 2048K $core" "3 Unified 61440K $node"; do
        read -r level type size id <<<"$spec"
        x="$d/cache/index$i"
        put "$x/level" "$level"
        put "$x/type" "$type"
        put "$x/size" "$size"
        put "$x/id" "$id"
        put "$x/coherency_line_size" "64"
        if [ "$level" -eq 3 ]; then
            put "$x/shared_cpu_list" "$pkg"
            put "$x/shared_cpu_map" "$pkgmask"
        else
            put "$x/shared_cpu_list" "$core,$((core + 8))"
            put "$x/shared_cpu_map" "$(mask $core $((core + 8)))"
        fi
        i=$((i + 1))
    done
done

# ----------------------------------------------------------------------- PCI
# Every device sits in its own IOMMU group (numbered from 10).
group=10
dev_dir() { echo "$sys/devices/pci${1%:*}/$1"; } # dev_dir ADDR: the device's directory

pci() { # pci ADDR VENDOR DEVICE CLASS NUMA DRIVER
    local addr=$1 vendor=$2 device=$3 class=$4 numa=$5 driver=$6
    local d rootbus
    d="$(dev_dir "$addr")"
    rootbus="pci${addr%:*}"
    put "$d/vendor" "$vendor"
    put "$d/device" "$device"
    put "$d/class" "$class"
    put "$d/numa_node" "$numa"
    put "$d/subsystem_vendor" "$vendor"
    put "$d/subsystem_device" "0x0000"
    if [ "$numa" -ge 0 ]; then
        put "$d/local_cpulist" "$(node_list "$numa")"
        # shellcheck disable=SC2046
        put "$d/local_cpus" "$(mask $(node_cpus "$numa"))"
    else
        put "$d/local_cpulist" "0-15"
        put "$d/local_cpus" "ffff"
    fi
    link "../../../devices/$rootbus/$addr" "$sys/bus/pci/devices/$addr"
    link "../../../bus/pci/drivers/$driver" "$d/driver"
    put "$sys/bus/pci/drivers/$driver/uevent" "DRIVER=$driver"
    link "../../../../devices/$rootbus/$addr" "$sys/bus/pci/drivers/$driver/$addr"
    link "../../../kernel/iommu_groups/$group" "$d/iommu_group"
    link "../../../../devices/$rootbus/$addr" "$sys/kernel/iommu_groups/$group/devices/$addr"
    group=$((group + 1))
}

netif() { # netif ADDR IFNAME MAC IFINDEX: an Ethernet interface (type 1)
    local d
    d="$(dev_dir "$1")/net/$2"
    put "$d/address" "$3"
    put "$d/ifindex" "$4"
    put "$d/operstate" "up"
    put "$d/type" "1"
    link "../../devices/pci${1%:*}/$1/net/$2" "$sys/class/net/$2"
}

rdma() { # rdma ADDR N: RDMA device mlx5_N with uverbsN, umadN and issmN
    local addr=$1 n=$2 d rel
    d="$(dev_dir "$addr")"
    rel="../../devices/pci${addr%:*}/$addr"
    put "$d/infiniband/mlx5_$n/node_type" "1: CA"
    link "$rel/infiniband/mlx5_$n" "$sys/class/infiniband/mlx5_$n"
    put "$d/infiniband_verbs/uverbs$n/ibdev" "mlx5_$n"
    put "$d/infiniband_verbs/uverbs$n/dev" "231:$((192 + n))"
    link "$rel/infiniband_verbs/uverbs$n" "$sys/class/infiniband_verbs/uverbs$n"
    put "$d/infiniband_mad/umad$n/ibdev" "mlx5_$n"
    put "$d/infiniband_mad/umad$n/port" "1"
    put "$d/infiniband_mad/issm$n/ibdev" "mlx5_$n"
    put "$d/infiniband_mad/issm$n/port" "1"
    link "$rel/infiniband_mad/umad$n" "$sys/class/infiniband_mad/umad$n"
    link "$rel/infiniband_mad/issm$n" "$sys/class/infiniband_mad/issm$n"
}

sriov() { # sriov PF TOTAL OFFSET VF...: enable the VFs (physfn/virtfnN links)
    local pf=$1 total=$2 offset=$3 i=0 vf d
    shift 3
    d="$(dev_dir "$pf")"
    put "$d/sriov_totalvfs" "$total"
    put "$d/sriov_numvfs" "$#"
    put "$d/sriov_offset" "$offset"
    put "$d/sriov_stride" "1"
    for vf in "$@"; do
        link "../$vf" "$d/virtfn$i"
        link "../$pf" "$(dev_dir "$vf")/physfn"
        i=$((i + 1))
    done
}

# Chipset USB controller without NUMA affinity.
pci 0000:00:14.0 0x8086 0xa1af 0x0c0330 -1 xhci_hcd

# Onboard management NICs (I350) on node 0, with ACPI indexes 1 and 2.
for f in 0 1; do
    addr="0000:01:00.$f"
    pci "$addr" 0x8086 0x1521 0x020000 0 igb
    netif "$addr" "eno$((f + 1))" "a4:bf:01:00:00:0$f" $((2 + f))
    put "$(dev_dir "$addr")/acpi_index" "$((f + 1))"
done

# Intel E810 PFs, one per node, 4 VFs each: VFs 0-1 on iavf (kernel
# interfaces), VFs 2-3 on vfio-pci (for DPDK, no interface).
ifindex=10
for spec in "0000:18 ens1f0 0" "0000:86 ens2f0 1"; do
    read -r bus ifname numa <<<"$spec"
    pf="$bus:00.0"
    pci "$pf" 0x8086 0x1592 0x020000 "$numa" ice
    netif "$pf" "$ifname" "b4:96:91:0$numa:00:00" $ifindex
    vfs=()
    for i in 0 1 2 3; do
        vf="$bus:01.$i"
        vfs+=("$vf")
        if [ "$i" -lt 2 ]; then
            pci "$vf" 0x8086 0x1889 0x020000 "$numa" iavf
            netif "$vf" "${ifname}v$i" "02:00:00:0$numa:00:0$i" $((ifindex + 1 + i))
        else
            pci "$vf" 0x8086 0x1889 0x020000 "$numa" vfio-pci
        fi
    done
    sriov "$pf" 128 8 "${vfs[@]}"
    ifindex=$((ifindex + 10))
done

# Mellanox ConnectX-5 PF on node 1 with 2 VFs, RDMA-capable (mlx5_core,
# RDMA devices mlx5_0 for the PF and mlx5_2, mlx5_3 for the VFs).
mlx=0000:d8:00.0
pci "$mlx" 0x15b3 0x1017 0x020000 1 mlx5_core
netif "$mlx" ens3f0 "0c:42:a1:00:00:00" 30
rdma "$mlx" 0
for i in 0 1; do
    vf="0000:d8:00.$((i + 2))"
    pci "$vf" 0x15b3 0x1018 0x020000 1 mlx5_core
    netif "$vf" "ens3f0v$i" "0c:42:a1:00:01:0$i" $((31 + i))
    rdma "$vf" $((i + 2))
done
sriov "$mlx" 8 2 0000:d8:00.2 0000:d8:00.3

# Intel FPGA accelerator (processing accelerator class 0x12) on node 1.
pci 0000:af:00.0 0x8086 0x0d90 0x120000 1 vfio-pci

# ---------------------------------------------------------------- /proc
# The IPv4 routing table beside the tree (proc/ next to sys/): eno1 carries
# the default route (destination and mask 00000000), so the SR-IOV device
# plugin's rules keep it out of every netDevice pool.
route() { printf '%s\t%s\t%s\t%s\t0\t0\t%s\t%s\t0\t0\t0\n' "$@"; }
mkdir -p "$here/proc/net"
{
    printf 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n'
    route eno1 00000000 0101A8C0 0003 100 00000000
    route eno1 0001A8C0 00000000 0001 100 00FFFFFF
    route ens1f0v0 00000A0A 00000000 0001 0 00FFFFFF
} >"$here/proc/net/route"

echo "wrote $sys and $here/proc"
