#!/usr/bin/env bash
# Installs what zym's tests need on a fresh Debian machine (run as root), then zym itself.
# System parts are best effort: where one cannot be set up, its tests skip and say why.
#   setup-ebpf.sh     BCC from Debian, kernel headers, tracefs (eBPF capture tests)
#   setup-browser.sh  Debian's chromium (HTML report test)
set -uo pipefail
cd "$(dirname "$0")/.."
for part in setup-ebpf setup-browser; do
    if [ -f "scripts/$part.sh" ]; then
        bash "scripts/$part.sh" || echo "install-deps: $part incomplete; its tests will skip" >&2
    fi
done
set -e
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
