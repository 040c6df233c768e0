#!/usr/bin/env bash
# Installs what zym's tests need on a fresh Debian machine (run as root), then zym itself.
# The eBPF capture part (BCC from Debian, kernel headers, tracefs) is best effort: when it cannot
# be set up, the eBPF tests skip and say why.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/setup-ebpf.sh ]; then
    bash scripts/setup-ebpf.sh || echo "install-deps: eBPF setup incomplete; eBPF tests will skip" >&2
fi
set -e
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
