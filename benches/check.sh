#!/usr/bin/env bash
# The in-memory check against governor's keyed limiter (three check_keys), criterion's bench
# `check` (benches/benches/check.rs) run ROUNDS times: each round measures both sides of every
# case back to back, and the ratio is taken per round, so that the machine's drift between
# rounds (this 2-core VM swings by a third) moves both sides of a ratio alike. Prints each
# round's estimates (criterion's median, ns per check), then the median over the rounds of
# each side and of the per-round ratios.
#
#   benches/check.sh                  # ROUNDS=4, the three target cases
#   ROUNDS=2 CASES=hot_keys benches/check.sh
#
# Settings (environment): ROUNDS (4), CASES (a criterion filter; default the three targets:
# one thread on hot keys, two threads on the same keys, two threads over 100,000 users).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${ROUNDS:-4}
cases=${CASES:-hot_keys|two_threads}
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# shellcheck source=benches/criterion.sh
. benches/criterion.sh
out=$CRITERION_HOME

for round in $(seq "$rounds"); do
  cargo bench --quiet -p tiered-ratelimit-benches --bench check -- "$cases" >/dev/null 2>&1
  for group in "$out"/*/; do
    group=$(basename "$group")
    [ -f "$out/$group/tiered_ratelimit/memory/new/estimates.json" ] || continue
    [ -f "$out/$group/governor_keyed_x3/memory/new/estimates.json" ] || continue
    echo "$group" | grep -qE "^(${cases//|/|})" || continue
    ours=$(criterion_median "$group" tiered_ratelimit)
    gov=$(criterion_median "$group" governor_keyed_x3)
    echo "$round $group $ours $gov" >>"$results"
    printf 'round %s  %-24s ours %7.1f ns  governor %7.1f ns  ratio %.2f\n' \
      "$round" "$group" "$ours" "$gov" "$(python3 -c "print($ours / $gov)")"
  done
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
groups = sorted({r[1] for r in rows})
print()
print("| case | ours (ns/check), median of rounds | governor keyed x3 (ns/check) | ratio (median of the rounds' ratios) |")
print("|---|---:|---:|---:|")
for g in groups:
    rs = [r for r in rows if r[1] == g]
    ours = statistics.median(float(r[2]) for r in rs)
    gov = statistics.median(float(r[3]) for r in rs)
    ratio = statistics.median(float(r[2]) / float(r[3]) for r in rs)
    print(f"| {g} | {ours:.1f} | {gov:.1f} | {ratio:.2f}x |")
PY
