#!/usr/bin/env bash
# Instructions per in-memory check, ours against three governor `check_key`s (the issue's
# baseline), counted by valgrind's callgrind in one build (benches/examples/count_check.rs),
# so that the ratio holds whatever else the machine is doing. Prints each mode's instructions
# per check and the ratio.
#
#   benches/count_check.sh                # N=20000
#   N=50000 benches/count_check.sh
#
# Built in the `instructions` profile (release, one codegen unit: Cargo.toml), as the CI guard
# (scripts/instructions.sh) is. Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${N:-20000}
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
cargo build --quiet --profile instructions -p tiered-ratelimit-benches --example count_check
bin=target/instructions/examples/count_check
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" "$bin" "$1" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out/cg.out"
}

declare -A per
for mode in ours ours_route governor; do
  a=$(count "$mode" "$n")
  b=$(count "$mode" $((2 * n)))
  per[$mode]=$(((b - a) / n))
  printf '%-10s %6d instructions per check\n' "$mode" "${per[$mode]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ours / governor:       $(ratio "${per[ours]}" "${per[governor]}")x the instructions"
echo "ours_route / governor: $(ratio "${per[ours_route]}" "${per[governor]}")x the instructions"
