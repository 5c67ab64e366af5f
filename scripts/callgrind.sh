# Sourced by the instruction counters (scripts/instructions.sh, benches/count_check.sh,
# benches/count_http.sh), so that they take a count the same way and never report one that
# was not taken. Needs `set -e` and `shopt -s inherit_errexit` in the script that sources it.

# callgrind_total DIR VALGRIND_ARGS... BIN ARGS...: the instructions callgrind counts in one
# run (the "summary:" line of its output, written in DIR). Fails, with the run's last lines,
# when valgrind fails or counts nothing: a guard that could not count must not pass.
callgrind_total() {
  local dir=$1 total
  shift
  rm -f "$dir/cg.out"
  if ! valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$@" >"$dir/run.log" 2>&1; then
    echo "callgrind: valgrind failed on: $*" >&2
    tail -n 20 "$dir/run.log" >&2
    exit 1
  fi
  total=$(awk '/^summary:/ {print $2}' "$dir/cg.out" 2>/dev/null || true)
  if ! [[ "$total" =~ ^[0-9]+$ ]] || [ "$total" -eq 0 ]; then
    echo "callgrind: nothing counted for: $*" >&2
    exit 1
  fi
  echo "$total"
}

# callgrind_per_op DIR N VALGRIND_ARGS... BIN MODE: the instructions one iteration of MODE
# costs, (count at 2N - count at N) / N, so that the set-up drops out. BIN takes MODE and a
# number of iterations as its two arguments.
callgrind_per_op() {
  local dir=$1 n=$2 a b
  shift 2
  a=$(callgrind_total "$dir" "$@" "$n")
  b=$(callgrind_total "$dir" "$@" $((2 * n)))
  # At least one instruction an iteration: a loop that does nothing, plus the few
  # instructions counts vary by from run to run, would otherwise round down to 0.
  if [ $((b - a)) -lt "$n" ]; then
    echo "callgrind: $* counted $a at N=$n and $b at 2N: not a count per iteration" >&2
    exit 1
  fi
  echo $(((b - a) / n))
}
