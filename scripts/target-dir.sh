#!/usr/bin/env bash
# Prints cargo's target directory for this workspace: `CARGO_TARGET_DIR`, a `build.target-dir`
# of a cargo config, or `target`, as cargo itself resolves them (`cargo metadata`). The bench
# and guard scripts read the binaries and criterion's results they built from there, so that
# a build into another directory is never mistaken for none (an audit: the guard once counted
# nothing and passed when CARGO_TARGET_DIR was set).
#
#   scripts/target-dir.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$dir" ] || { echo "target-dir.sh: cargo metadata named no target directory" >&2; exit 1; }
echo "$dir"
