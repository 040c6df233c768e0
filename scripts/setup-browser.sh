#!/usr/bin/env bash
# Installs headless Chromium (Debian's `chromium`) for the HTML report test
# (tests/export/test_report.py). Run as root; without it that test skips and says why.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y chromium
