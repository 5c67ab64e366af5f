#!/usr/bin/env bash
# Instructions per in-memory check, ours against three governor `check_key`s (the issue's
# baseline), counted by valgrind's callgrind in one build (benches/examples/count_check.rs),
# so that the ratio holds whatever else the machine is doing. Prints each mode's instructions
# per check and the ratio.
#
#   benches/count_check.sh                # N=20000
#   N=50000 benches/count_check.sh
#   TIERS=1 benches/count_check.sh        # also ours with one tier at a time, and with none:
#                                         # what a check costs whatever its tiers, what each adds
#
# Built in the `instructions` profile (release, one codegen unit: Cargo.toml), as the CI guard
# (scripts/instructions.sh) is. Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${N:-20000}
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
cargo build --quiet --profile instructions -p tiered-ratelimit-benches --example count_check
bin=$(scripts/target-dir.sh)/instructions/examples/count_check
[ -x "$bin" ] || { echo "count_check.sh: no binary at $bin" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck source=scripts/callgrind.sh
. scripts/callgrind.sh

modes="ours ours_route governor"
[ "${TIERS:-0}" = 1 ] && modes="$modes ours_none ours_global ours_user ours_endpoint ours_user_endpoint"
declare -A per
for mode in $modes; do
  # Only the checks' loop (and what it calls) is counted, not the set-up: see count_check.rs.
  per[$mode]=$(callgrind_per_op "$out" "$n" --toggle-collect='count_check::*_checks' "$bin" "$mode")
  printf '%-10s %6d instructions per check\n' "$mode" "${per[$mode]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ours / governor:       $(ratio "${per[ours]}" "${per[governor]}")x the instructions"
echo "ours_route / governor: $(ratio "${per[ours_route]}" "${per[governor]}")x the instructions"
if [ "${TIERS:-0}" = 1 ]; then
  # A check as the sum of the limiter's own work (no tier applies: `ours_none`), the store's
  # work whatever its tiers, and each tier's: with one tier on, the store's work plus that
  # tier's; with three, the store's once plus all three. So the store's is half of what the
  # three one-tier checks count beyond the three-tier one.
  none=${per[ours_none]}
  g=$((per[ours_global] - none))
  u=$((per[ours_user] - none))
  e=$((per[ours_endpoint] - none))
  all=$((per[ours] - none))
  store=$(((g + u + e - all) / 2))
  echo "the limiter's own work (no tier):        $none"
  echo "the store's own work (whatever the tiers): $store"
  echo "each tier: user $((u - store)), endpoint $((e - store)), global $((g - store)); governor's check_key: $((per[governor] / 3))"
  # Five counts fix the five parts; a sixth tests that they add up (that tiers do not change
  # each other's cost): user and endpoint alone, against the sum of their parts.
  echo "user + endpoint: $((per[ours_user_endpoint] - none)) counted, $((store + u - store + e - store)) from the parts"
  echo "(the limiter's figure holds the harness's loop and its manual clock too: about 30)"
fi
