#!/usr/bin/env bash
# The device tool sends the working tree (tracked files, untracked ones git does not ignore,
# carried paths) up to 64 MiB; the kept what-if results and the bundled traces put the tracked
# files past that (73 MiB at the fifty-third round). A device call that needs neither (a
# blind round, a capture of a workload) runs from a lean tree:
#
#   bash bench/device/lean_tree.sh off   # remove them from the working tree (commit first)
#   ... the device call(s) ...
#   bash bench/device/lean_tree.sh on    # restore them from git
#
# `off` refuses while those paths have changes git would lose. Nothing else is touched.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PATHS=(bench/whatif/results sample_traces)
case "${1:-}" in
  off)
    if [ -n "$(git status --porcelain -- "${PATHS[@]}")" ]; then
      echo "lean_tree: uncommitted changes under ${PATHS[*]}: commit them first" >&2
      exit 2
    fi
    git ls-files -z -- "${PATHS[@]}" | xargs -0 rm -f
    echo "lean_tree: removed; tracked files now $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes on disk"
    ;;
  on)
    git checkout -- "${PATHS[@]}"
    echo "lean_tree: restored"
    ;;
  *)
    echo "usage: bash bench/device/lean_tree.sh off|on" >&2
    exit 2
    ;;
esac
