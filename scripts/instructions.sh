#!/usr/bin/env bash
# The instruction-count guard: counts, with valgrind's callgrind, the instructions of
#   check        one three-tier memory check (RateLimiter::check, hot keys)
#   check_route  the same on a route with a parameter (/api/v1/items/{id}: its key is encoded)
#   layer        the layer's work per request (an axum router with RateLimitLayer, minus the router)
# and fails when one goes over its budget in scripts/instruction-budget.txt by more than the
# tolerance there. Instructions, not time: the count is the same within a few instructions
# whatever else the machine is doing (docs/BENCHMARKS.md section 8), so noise cannot hide a
# regression and a loaded CI machine cannot fake one. A run that cannot count (valgrind
# failing, no binary where cargo put it) fails the guard; it never passes on a count of 0.
#
#   scripts/instructions.sh            # measure and compare with the budget (CI runs this)
#   scripts/instructions.sh --update   # measure and write the figures as the new budget
#
# Raising the budget is a decision, not a side effect: run --update, and commit the new
# budget file with a message that says what the instructions bought (docs/BENCHMARKS.md).
set -euo pipefail
# A failure inside $(...) fails the script too: a count that could not be taken is never 0.
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

budget_file=scripts/instruction-budget.txt
n=${INSTRUCTIONS_N:-20000}

if ! command -v valgrind >/dev/null; then
  echo "valgrind is missing: apt-get install valgrind (Debian/Ubuntu), brew install valgrind (Linux only)" >&2
  exit 1
fi

# The `instructions` profile (Cargo.toml): release in one codegen unit, so that a change in one
# module cannot move another's count by changing how rustc splits the crate into units.
cargo build --quiet --profile instructions --example instructions
bin=$(scripts/target-dir.sh)/instructions/examples/instructions
[ -x "$bin" ] || { echo "instructions.sh: no binary at $bin" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=scripts/callgrind.sh
. scripts/callgrind.sh
per_op() { callgrind_per_op "$out" "$n" "$bin" "$1"; }

check=$(per_op check)
check_route=$(per_op check_route)
router=$(per_op router)
layer_total=$(per_op layer)
layer=$((layer_total - router))

echo "instructions per memory check:        $check"
echo "  on a route with a parameter:          $check_route"
echo "instructions per request, router:     $router"
echo "instructions per request, with layer: $layer_total (the layer's work: $layer)"

if [ "${1:-}" = "--update" ]; then
  tolerance=$(awk '$1=="tolerance_percent" {print $2}' "$budget_file" 2>/dev/null || true)
  cat >"$budget_file" <<BUDGET
# Instruction budget checked by scripts/instructions.sh (CI). Written by
# \`scripts/instructions.sh --update\` on $(date -u +%Y-%m-%d), $(rustc --version).
# A figure over its budget by more than tolerance_percent fails CI.
check $check
check_route $check_route
layer $layer
tolerance_percent ${tolerance:-3}
BUDGET
  echo "wrote $budget_file"
  exit 0
fi

tolerance=$(awk '$1=="tolerance_percent" {print $2}' "$budget_file")
status=0
for name in check check_route layer; do
  budget=$(awk -v k="$name" '$1==k {print $2}' "$budget_file")
  measured=${!name}
  limit=$((budget + budget * tolerance / 100))
  if [ "$measured" -gt "$limit" ]; then
    echo "OVER BUDGET: $name takes $measured instructions; the budget is $budget (+$tolerance% = $limit)." >&2
    echo "  If the cost is deliberate, run scripts/instructions.sh --update and say why in the commit." >&2
    status=1
  else
    echo "$name: $measured within budget $budget (+$tolerance%)"
  fi
done
exit $status
