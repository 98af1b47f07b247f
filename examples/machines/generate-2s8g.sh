#!/usr/bin/env bash
# Regenerates examples/machines/2s8g/sys: a hand-made sysfs tree of a
# 2-socket GPU server, for the GPU provider's example and tests
# (`topomgr topology --sysfs-root examples/machines/2s8g/sys`).
#
# - 2 sockets, one NUMA node each; 32 CPUs: node n holds cores 8n..8n+7
#   (CPUs 8n..8n+7) and their hyperthreads (CPUs 8n+16..8n+23).
# - 64 GiB per node (MemFree 60 and 62 GiB), 2048kB hugepages 1024/1024,
#   distances 10 local, 21 remote, one L3 per socket.
# - PCI: eight NVIDIA A100 80GB PCIe GPUs (10de:20b5, class 0x030200),
#   four per node: 0000:17:00.0 0000:18:00.0 0000:3a:00.0 0000:3b:00.0 on
#   node 0, 0000:86:00.0 0000:87:00.0 0000:af:00.0 0000:b0:00.0 on node 1.
#   Their links (NVLink bridges in pairs) are in 2s8g/gpu-topology.json.
# All links in the tree are relative, so it works wherever it is checked out.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sys="$here/2s8g/sys"
rm -rf "$sys"
mkdir -p "$sys"

put() { # put FILE LINE...
    mkdir -p "$(dirname "$1")"
    local f="$1"
    shift
    printf '%s\n' "$@" >"$f"
}
symlink() { # symlink TARGET NAME
    mkdir -p "$(dirname "$2")"
    ln -sfn "$1" "$2"
}
hexmask() { # hexmask CPU...: 32-bit kernel mask
    local m=0 c
    for c in "$@"; do m=$((m | (1 << c))); done
    printf '%08x' "$m"
}
cpus_of() { # cpus_of NODE
    seq $((8 * $1)) $((8 * $1 + 7))
    seq $((8 * $1 + 16)) $((8 * $1 + 23))
}
list_of() { # list_of NODE: Linux list of the node's CPUs
    echo "$((8 * $1))-$((8 * $1 + 7)),$((8 * $1 + 16))-$((8 * $1 + 23))"
}
cache() { # cache CPUDIR INDEX LEVEL TYPE SIZE ID SHARED_LIST SHARED_MAP
    local x="$1/cache/index$2"
    put "$x/level" "$3"
    put "$x/type" "$4"
    put "$x/size" "$5"
    put "$x/id" "$6"
    put "$x/coherency_line_size" "64"
    put "$x/shared_cpu_list" "$7"
    put "$x/shared_cpu_map" "$8"
}

nodes="$sys/devices/system/node"
for f in online possible has_cpu has_memory has_normal_memory; do put "$nodes/$f" "0-1"; done
free_kb=(62914560 65011712)
for n in 0 1; do
    d="$nodes/node$n"
    # shellcheck disable=SC2046
    put "$d/cpumap" "$(hexmask $(cpus_of $n))"
    put "$d/cpulist" "$(list_of $n)"
    if [ "$n" -eq 0 ]; then put "$d/distance" "10 21"; else put "$d/distance" "21 10"; fi
    total=67108864
    put "$d/meminfo" \
        "Node $n MemTotal:       $total kB" \
        "Node $n MemFree:        ${free_kb[$n]} kB" \
        "Node $n MemUsed:        $((total - free_kb[n])) kB" \
        "Node $n HugePages_Total:  1024" \
        "Node $n HugePages_Free:   1024" \
        "Node $n HugePages_Surp:      0"
    h="$d/hugepages/hugepages-2048kB"
    put "$h/nr_hugepages" "1024"
    put "$h/free_hugepages" "1024"
    put "$h/surplus_hugepages" "0"
    for c in $(cpus_of $n); do symlink "../../cpu/cpu$c" "$d/cpu$c"; done
done

cpus="$sys/devices/system/cpu"
for f in online possible present; do put "$cpus/$f" "0-31"; done
put "$cpus/offline" ""
for c in $(seq 0 31); do
    d="$cpus/cpu$c"
    core=$((c % 16))
    node=$((core / 8))
    sibling=$((core + 16))
    pkg="$(list_of $node)"
    coremask="$(hexmask $core $sibling)"
    # shellcheck disable=SC2046
    pkgmask="$(hexmask $(cpus_of $node))"
    if [ "$c" -ne 0 ]; then put "$d/online" "1"; fi
    symlink "../../node/node$node" "$d/node$node"
    t="$d/topology"
    put "$t/physical_package_id" "$node"
    put "$t/die_id" "0"
    put "$t/core_id" "$((core % 8))"
    for f in core_cpus thread_siblings; do
        put "$t/${f}_list" "$core,$sibling"
        put "$t/$f" "$coremask"
    done
    for f in core_siblings package_cpus die_cpus; do
        put "$t/${f}_list" "$pkg"
        put "$t/$f" "$pkgmask"
    done
    cache "$d" 0 1 Data 48K "$core" "$core,$sibling" "$coremask"
    cache "$d" 1 1 Instruction 32K "$core" "$core,$sibling" "$coremask"
    cache "$d" 2 2 Unified 2048K "$core" "$core,$sibling" "$coremask"
    cache "$d" 3 3 Unified 61440K "$node" "$pkg" "$pkgmask"
done

gpu() { # gpu ADDRESS NODE
    local addr=$1 node=$2
    local rootbus="${addr%:*.*}"
    local d="$sys/devices/pci$rootbus/$addr"
    put "$d/vendor" "0x10de"
    put "$d/device" "0x20b5"
    put "$d/class" "0x030200"
    put "$d/numa_node" "$node"
    put "$d/subsystem_vendor" "0x10de"
    put "$d/subsystem_device" "0x1533"
    put "$d/local_cpulist" "$(list_of "$node")"
    # shellcheck disable=SC2046
    put "$d/local_cpus" "$(hexmask $(cpus_of "$node"))"
    symlink "../../../devices/pci$rootbus/$addr" "$sys/bus/pci/devices/$addr"
    symlink "../../../bus/pci/drivers/nvidia" "$d/driver"
    symlink "../../../../devices/pci$rootbus/$addr" "$sys/bus/pci/drivers/nvidia/$addr"
}
put "$sys/bus/pci/drivers/nvidia/uevent" "DRIVER=nvidia"
for a in 0000:17:00.0 0000:18:00.0 0000:3a:00.0 0000:3b:00.0; do gpu "$a" 0; done
for a in 0000:86:00.0 0000:87:00.0 0000:af:00.0 0000:b0:00.0; do gpu "$a" 1; done
echo "wrote $sys"
