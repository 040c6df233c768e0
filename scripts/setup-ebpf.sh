#!/usr/bin/env bash
# Sets up what `zym capture` (eBPF) needs on a Debian/Ubuntu machine, as root. Idempotent.
#   * BCC from the distribution (python3-bpfcc): BCC is not on PyPI; zym finds it in
#     /usr/lib/python3/dist-packages at run time.
#   * kernel headers: BCC compiles the BPF C at run time against /lib/modules/$(uname -r)/build.
#     Cloud and microVM kernels often ship none; the distribution's headers of another kernel
#     version work, because zym takes the one kernel offset it needs (task_struct.thread.fsbase)
#     from BTF, not from the headers. So we link the installed header tree in.
#   * tracefs mounted at /sys/kernel/tracing (uprobes are created through it).
set -euo pipefail

log() { echo "setup-ebpf: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    log "must run as root"; exit 1
fi

install_packages() {
    local need=()
    python3_bcc_ok || need+=(python3-bpfcc)
    headers_tree >/dev/null || need+=(linux-headers-amd64)
    command -v gcc >/dev/null || need+=(gcc)
    command -v g++ >/dev/null || need+=(g++)     # the tests' torch stand-in (C++, no frame pointers)
    command -v objdump >/dev/null || need+=(binutils)   # objdump, readelf, nm: the tests' second opinion
    [ ${#need[@]} -eq 0 ] && return 0
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # On Ubuntu the header meta-package has another name; try it if the Debian one is absent.
    if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
        local alt=("${need[@]/linux-headers-amd64/linux-headers-generic}")
        apt-get install -y -qq --no-install-recommends "${alt[@]}" >/dev/null
    fi
}

python3_bcc_ok() {
    /usr/bin/python3 -c 'import bcc' 2>/dev/null
}

# Prints the newest installed arch-specific header tree (/usr/src/linux-headers-X-amd64 or -generic).
headers_tree() {
    local d
    d=$(ls -d /usr/src/linux-headers-*-amd64 /usr/src/linux-headers-*-generic 2>/dev/null \
        | sort -V | tail -n 1)
    [ -n "$d" ] && [ -d "$d" ] && echo "$d"
}

link_headers() {
    local kdir="/lib/modules/$(uname -r)"
    if [ -e "$kdir/build/include" ]; then
        return 0
    fi
    local tree common
    tree=$(headers_tree) || { log "no kernel headers installed"; return 1; }
    # Debian splits headers into an arch tree and a -common tree that the arch tree's Makefile
    # points at; BCC looks for the latter under .../source.
    common=$(ls -d "${tree%-*}-common" 2>/dev/null || echo "$tree")
    mkdir -p "$kdir"
    ln -sfn "$tree" "$kdir/build"
    ln -sfn "$common" "$kdir/source"
    log "linked $kdir/build -> $tree, source -> $common"
}

mount_tracefs() {
    if [ -e /sys/kernel/tracing/uprobe_events ]; then
        return 0
    fi
    mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null \
        || mount -t debugfs debugfs /sys/kernel/debug
    log "mounted tracefs"
}

install_packages
link_headers
mount_tracefs
[ -r /sys/kernel/btf/vmlinux ] || log "warning: no /sys/kernel/btf/vmlinux; zym capture needs BTF"
python3_bcc_ok && log "ok: BCC $(/usr/bin/python3 -c 'import bcc; print(bcc.__version__)')"
