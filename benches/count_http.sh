#!/usr/bin/env bash
# Instructions per request of the HTTP comparison's ten servers, counted by valgrind's
# callgrind in process (benches/examples/count_http.rs): the user-space work wrk's figures
# hold, without the kernel's TCP work and without noise. Prints each mode's instructions per
# request, ours (`ours` and `inner`) against `headers` and tower_governor (with and without
# its headers), `inner_handler` (ours on the handler) against `inner`, and the floor (a layer
# that checks nothing and writes the same two headers, as cheaply as it can: the least any
# limiter in ours' place can take) against the same baselines.
#
#   benches/count_http.sh                 # N=20000
#   N=50000 benches/count_http.sh
#
# Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${N:-20000}
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
cargo build --quiet --release -p tiered-ratelimit-benches --example count_http
bin=$(scripts/target-dir.sh)/release/examples/count_http
[ -x "$bin" ] || { echo "count_http.sh: no binary at $bin" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck source=scripts/callgrind.sh
. scripts/callgrind.sh

declare -A per
for mode in bare headers ours inner inner_handler governor governor_headers governor_handler floor floor_handler; do
  # Only the requests' loop (and what it calls) is counted, not the set-up: see count_http.rs.
  per[$mode]=$(callgrind_per_op "$out" "$n" --toggle-collect='count_http::requests' "$bin" "$mode")
  printf '%-16s %7d instructions per request\n' "$mode" "${per[$mode]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ours / headers:  $(ratio "${per[ours]}" "${per[headers]}")x the instructions"
echo "ours / governor: $(ratio "${per[ours]}" "${per[governor]}")x the instructions"
echo "inner / headers: $(ratio "${per[inner]}" "${per[headers]}")x the instructions"
echo "inner / governor: $(ratio "${per[inner]}" "${per[governor]}")x the instructions"
echo "inner / governor_headers: $(ratio "${per[inner]}" "${per[governor_headers]}")x the instructions (tower_governor writing two headers too)"
echo "inner_handler / inner: $(ratio "${per[inner_handler]}" "${per[inner]}")x the instructions (on the handler instead of with route_layer: $((per[inner_handler] - per[inner])))"
echo "layer's own work: ours $((per[ours] - per[bare])), inner $((per[inner] - per[bare])), tower_governor $((per[governor] - per[bare])), with its headers $((per[governor_headers] - per[bare])) (each minus bare)"
echo "floor / headers: $(ratio "${per[floor]}" "${per[headers]}")x the instructions (floor - headers: $((per[floor] - per[headers])); target 2 is judged in time, where the kernel's work is most of a request: docs/BENCHMARKS.md section 34)"
echo "floor / governor: $(ratio "${per[floor]}" "${per[governor]}")x the instructions (a check of any cost comes on top)"
echo "floor_handler / headers: $(ratio "${per[floor_handler]}" "${per[headers]}")x, / governor: $(ratio "${per[floor_handler]}" "${per[governor]}")x, / governor_handler: $(ratio "${per[floor_handler]}" "${per[governor_handler]}")x (the floor on the handler)"
echo "inner_handler / governor_handler: $(ratio "${per[inner_handler]}" "${per[governor_handler]}")x (both on the handler)"
echo "inner - floor: $((per[inner] - per[floor])) (ours' check and its number, beyond the floor)"
