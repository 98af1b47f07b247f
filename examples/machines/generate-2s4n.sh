#!/usr/bin/env bash
# Regenerates examples/machines/2s4n/sys: a small hand-made sysfs tree of a
# 2-socket machine with sub-NUMA clustering (2 NUMA nodes per socket), for
# `topomgr topology --sysfs-root examples/machines/2s4n/sys` and the tests.
#
# - 16 CPUs: NUMA node n holds CPUs 2n, 2n+1 and their hyperthreads 2n+8, 2n+9
#   (2 cores x 2 threads per node); socket s holds nodes 2s and 2s+1.
# - 8 GiB per node, hugepages of 2048kB and 1048576kB, distances 10/12/20.
# - one L3 per socket (cache id = socket).
# - PCI: NVIDIA GPUs on nodes 0 and 2, an SR-IOV NIC PF with 2 VFs on node 1,
#   a USB controller with numa_node -1.
# All links are relative, so the tree works wherever it is checked out.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sys="$here/2s4n/sys"
rm -rf "$here/2s4n/sys"
mkdir -p "$sys"

put() { # put FILE CONTENT...: write one attribute file
    mkdir -p "$(dirname "$1")"
    local f="$1"
    shift
    printf '%s\n' "$@" >"$f"
}
link() { # link TARGET NAME
    mkdir -p "$(dirname "$2")"
    ln -sfn "$1" "$2"
}
mask16() { # mask16 CPU...: 16-bit kernel hex mask
    local m=0 c
    for c in "$@"; do m=$((m | (1 << c))); done
    printf '%04x' "$m"
}

node_cpus() { # node_cpus N: the CPU ids of node N
    local n=$1
    echo $((2 * n)) $((2 * n + 1)) $((2 * n + 8)) $((2 * n + 9))
}
node_list() { # node_list N: Linux list of node N's CPUs
    local n=$1
    echo "$((2 * n))-$((2 * n + 1)),$((2 * n + 8))-$((2 * n + 9))"
}

# ---------------------------------------------------------------- NUMA nodes
distances=("10 12 20 20" "12 10 20 20" "20 20 10 12" "20 20 12 10")
mem_free_kb=(6291456 7340032 5242880 7864320)
huge_2m=("512 384" "512 512" "256 256" "0 0")
huge_1g=("2 1" "1 1" "0 0" "2 2")
nroot="$sys/devices/system/node"
put "$nroot/online" "0-3"
put "$nroot/possible" "0-3"
put "$nroot/has_cpu" "0-3"
put "$nroot/has_memory" "0-3"
put "$nroot/has_normal_memory" "0-3"
for n in 0 1 2 3; do
    d="$nroot/node$n"
    # shellcheck disable=SC2046
    put "$d/cpumap" "$(mask16 $(node_cpus $n))"
    put "$d/cpulist" "$(node_list $n)"
    put "$d/distance" "${distances[$n]}"
    total=8388608
    free=${mem_free_kb[$n]}
    read -r h2t h2f <<<"${huge_2m[$n]}"
    read -r h1t h1f <<<"${huge_1g[$n]}"
    put "$d/meminfo" \
        "Node $n MemTotal:       $total kB" \
        "Node $n MemFree:        $free kB" \
        "Node $n MemUsed:        $((total - free)) kB" \
        "Node $n Active:          $(((total - free) / 2)) kB" \
        "Node $n Inactive:        $(((total - free) / 4)) kB" \
        "Node $n Dirty:                12 kB" \
        "Node $n FilePages:       $(((total - free) / 4)) kB" \
        "Node $n AnonPages:       $(((total - free) / 2)) kB" \
        "Node $n HugePages_Total:   $h2t" \
        "Node $n HugePages_Free:    $h2f" \
        "Node $n HugePages_Surp:      0"
    put "$d/hugepages/hugepages-2048kB/nr_hugepages" "$h2t"
    put "$d/hugepages/hugepages-2048kB/free_hugepages" "$h2f"
    put "$d/hugepages/hugepages-2048kB/surplus_hugepages" "0"
    put "$d/hugepages/hugepages-1048576kB/nr_hugepages" "$h1t"
    put "$d/hugepages/hugepages-1048576kB/free_hugepages" "$h1f"
    put "$d/hugepages/hugepages-1048576kB/surplus_hugepages" "0"
    for c in $(node_cpus $n); do
        link "../../cpu/cpu$c" "$d/cpu$c"
    done
done

# ---------------------------------------------------------------------- CPUs
croot="$sys/devices/system/cpu"
put "$croot/online" "0-15"
put "$croot/possible" "0-15"
put "$croot/present" "0-15"
put "$croot/offline" ""
for c in $(seq 0 15); do
    d="$croot/cpu$c"
    base=$((c % 8))            # the core's first thread
    node=$((base / 2))
    socket=$((node / 2))
    sibling=$((base + 8))
    if [ "$c" -ne 0 ]; then put "$d/online" "1"; fi
    link "../../node/node$node" "$d/node$node"
    if [ "$socket" -eq 0 ]; then pkg="0-3,8-11"; pkgcpus="0 1 2 3 8 9 10 11"; else pkg="4-7,12-15"; pkgcpus="4 5 6 7 12 13 14 15"; fi
    t="$d/topology"
    put "$t/physical_package_id" "$socket"
    put "$t/die_id" "0"
    put "$t/core_id" "$((base % 4))"
    put "$t/core_cpus_list" "$base,$sibling"
    put "$t/core_cpus" "$(mask16 $base $sibling)"
    put "$t/thread_siblings_list" "$base,$sibling"
    put "$t/thread_siblings" "$(mask16 $base $sibling)"
    # shellcheck disable=SC2086
    put "$t/core_siblings" "$(mask16 $pkgcpus)"
    put "$t/core_siblings_list" "$pkg"
    # shellcheck disable=SC2086
    put "$t/package_cpus" "$(mask16 $pkgcpus)"
    put "$t/package_cpus_list" "$pkg"
    # shellcheck disable=SC2086
    put "$t/die_cpus" "$(mask16 $pkgcpus)"
    put "$t/die_cpus_list" "$pkg"
    i=0
    for spec in "1 Data 48K $base" "1 Instruction 32K $base" "2 Unified 2048K $base" "3 Unified 30720K $socket"; do
        read -r level type size id <<<"$spec"
        x="$d/cache/index$i"
        put "$x/level" "$level"
        put "$x/type" "$type"
        put "$x/size" "$size"
        put "$x/id" "$id"
        put "$x/coherency_line_size" "64"
        if [ "$level" -eq 3 ]; then
            put "$x/shared_cpu_list" "$pkg"
            # shellcheck disable=SC2086
            put "$x/shared_cpu_map" "$(mask16 $pkgcpus)"
        else
            put "$x/shared_cpu_list" "$base,$sibling"
            put "$x/shared_cpu_map" "$(mask16 $base $sibling)"
        fi
        i=$((i + 1))
    done
done

# ----------------------------------------------------------------------- PCI
pci_dev() { # pci_dev ROOTBUS ADDR VENDOR DEVICE CLASS NUMA DRIVER
    local rootbus=$1 addr=$2 vendor=$3 device=$4 class=$5 numa=$6 driver=$7
    local d="$sys/devices/pci$rootbus/$addr"
    put "$d/vendor" "$vendor"
    put "$d/device" "$device"
    put "$d/class" "$class"
    put "$d/numa_node" "$numa"
    put "$d/subsystem_vendor" "$vendor"
    put "$d/subsystem_device" "0x0000"
    if [ "$numa" -ge 0 ]; then
        put "$d/local_cpulist" "$(node_list "$numa")"
        # shellcheck disable=SC2046
        put "$d/local_cpus" "$(mask16 $(node_cpus "$numa"))"
    else
        put "$d/local_cpulist" "0-15"
        put "$d/local_cpus" "ffff"
    fi
    link "../../../devices/pci$rootbus/$addr" "$sys/bus/pci/devices/$addr"
    link "../../../bus/pci/drivers/$driver" "$d/driver"
    put "$sys/bus/pci/drivers/$driver/uevent" "DRIVER=$driver"
    link "../../../../devices/pci$rootbus/$addr" "$sys/bus/pci/drivers/$driver/$addr"
}
net_if() { # net_if ROOTBUS ADDR IFNAME MAC IFINDEX
    local d="$sys/devices/pci$1/$2/net/$3"
    put "$d/address" "$4"
    put "$d/ifindex" "$5"
    put "$d/operstate" "up"
}

pci_dev 0000:00 0000:00:14.0 0x8086 0xa1af 0x0c0330 -1 xhci_hcd
pci_dev 0000:17 0000:17:00.0 0x10de 0x20b0 0x030200 0 nvidia
pci_dev 0000:b1 0000:b1:00.0 0x10de 0x20b0 0x030200 2 nvidia

pci_dev 0000:3b 0000:3b:00.0 0x8086 0x158b 0x020000 1 i40e
net_if 0000:3b 0000:3b:00.0 ens2f0 "3c:fd:fe:a1:00:00" 4
pf="$sys/devices/pci0000:3b/0000:3b:00.0"
put "$pf/sriov_totalvfs" "64"
put "$pf/sriov_numvfs" "2"
put "$pf/sriov_offset" "16"
put "$pf/sriov_stride" "1"
for vf in 0 1; do
    addr="0000:3b:02.$vf"
    pci_dev 0000:3b "$addr" 0x8086 0x154c 0x020000 1 iavf
    net_if 0000:3b "$addr" "ens2f0v$vf" "02:00:00:00:00:0$vf" $((10 + vf))
    link "../$addr" "$pf/virtfn$vf"
    link "../0000:3b:00.0" "$sys/devices/pci0000:3b/$addr/physfn"
done
echo "wrote $sys"
