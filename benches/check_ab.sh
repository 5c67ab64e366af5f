#!/usr/bin/env bash
# Two builds of the in-memory check side by side: the criterion bench `check`
# (benches/benches/check.rs) of this tree and of a base build, run in turn ROUNDS times, each
# run measuring ours and governor's three check_keys. A change that moves the check by a few
# percent cannot be told from one run to the next on these 2-core VMs (governor's own figure
# moves by a fifth between rounds), but it shows when both builds run interleaved in one
# session: compare ours in ns between the builds, round by round, and each build's ratio to
# governor.
#
#   # the base: the bench binary of an earlier commit, built in a clone of it
#   git clone . /tmp/base && git -C /tmp/base checkout <commit>
#   (cd /tmp/base && CARGO_TARGET_DIR=/tmp/base-target \
#      cargo bench -p tiered-ratelimit-benches --bench check --no-run)   # prints the binary
#   BASE_BIN=/tmp/base-target/release/deps/check-<hash> ROUNDS=5 benches/check_ab.sh
#
# Settings (environment): BASE_BIN (required), ROUNDS (5), CASES (a criterion filter; default
# the three targets), WARMUP and MEASURE (criterion's seconds per case, 2 and 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${BASE_BIN:?BASE_BIN: the bench binary of the base build, see the top of this script}"
rounds=${ROUNDS:-5}
cases=${CASES:-hot_keys|two_threads}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

new=$(cargo bench -p tiered-ratelimit-benches --bench check --no-run 2>&1 |
  sed -n 's/.*Executable benches\/check.rs (\(.*\))/\1/p')
[ -x "$new" ] || { echo "could not build this tree's bench binary" >&2; exit 1; }
cp "$new" "$work/new"
cp "$BASE_BIN" "$work/base"

# shellcheck source=benches/criterion.sh
. benches/criterion.sh

# One run of a build: "build case ours_ns governor_ns", a line per case it ran, each criterion's
# median estimate (as benches/check.sh reads it).
run() {
  "$work/$1" --bench "$cases" --warm-up-time "${WARMUP:-2}" --measurement-time "${MEASURE:-4}" \
    2>/dev/null | sed -n 's#^\([^/ ]*\)/tiered_ratelimit/memory.*#\1#p' | sort -u |
    while read -r group; do
      echo "$1 $group $(criterion_median "$group" tiered_ratelimit)" \
        "$(criterion_median "$group" governor_keyed_x3)"
    done
}

for round in $(seq "$rounds"); do
  for build in base new; do
    run "$build" | tee -a "$work/rows" | awk -v r="$round" \
      '{ printf "round %s  %-4s %-24s ours %7.1f ns  governor %7.1f ns  ratio %.3f\n", r, $1, $2, $3, $4, $3 / $4 }'
  done
done

python3 - "$work/rows" <<'PY'
import statistics as st, sys
rows = [line.split() for line in open(sys.argv[1])]
print()
print("| case | ours, base (ns) | ours, new (ns) | new / base | base / governor | new / governor |")
print("|---|---:|---:|---:|---:|---:|")
for case in sorted({r[1] for r in rows}):
    side = lambda b: [(float(r[2]), float(r[3])) for r in rows if r[0] == b and r[1] == case]
    base, new = side("base"), side("new")
    ob, on = st.median(o for o, _ in base), st.median(o for o, _ in new)
    rb, rn = st.median(o / g for o, g in base), st.median(o / g for o, g in new)
    print(f"| {case} | {ob:.1f} | {on:.1f} | {on / ob:.2f} | {rb:.2f}x | {rn:.2f}x |")
PY
