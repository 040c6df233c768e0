#!/usr/bin/env bash
# Installs what zym's tests need on a fresh Debian machine (run as root), then zym itself.
#   setup-ebpf.sh     BCC from Debian, kernel headers, tracefs (eBPF capture tests)
#   setup-browser.sh  Debian's chromium (HTML report test)
#   ruff, cupti-python (PyPI): the linter CI runs, and NVIDIA's CUPTI bindings that the
#                     record-layout test compares zym's layouts with
# Any part that fails to install fails this script (and so CI). To run the tests on a machine
# where a system part cannot be set up, install zym alone (pip install -e '.[test]'): those
# tests then skip and say why, unless ZYM_REQUIRE_SYSTEM=1 (as in .ci/run) makes them fail.
# trace_processor_shell (tests/export/test_trace_processor.py) is not shipped by any package
# registry reachable here (PyPI's perfetto downloads it at run time); see README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
for part in setup-ebpf setup-browser; do
    bash "scripts/$part.sh" || { echo "install-deps: $part failed" >&2; exit 1; }
done
# The compiled parts (capture/_kineto_scan.c, schemas/_stacks.c) are built by pip: gcc comes with
# setup-ebpf.sh; the Python headers come with the python3 that runs here, or from Debian.
if ! python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-dev >/dev/null; } \
        || { echo "install-deps: python3-dev failed" >&2; exit 1; }
fi
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]' ruff cupti-python
