#!/usr/bin/env bash
# Two builds of the HTTP bench server (benches/examples/bench_http.rs) side by side, in paired
# rounds: each round serves MODE from build A and then from build B (B first every other
# round), under the same wrk load, and prints both builds' requests/s and server CPU per
# request (user + system, over the timed run) with B/A; the medians of the rounds' ratios at
# the end. For a change of a few percent, which two runs of benches/http.sh (one per build)
# cannot tell from the machine's drift between them.
#
#   BASE_BIN=/tmp/base/target/release/examples/bench_http benches/http_ab.sh
#   ROUNDS=9 MODE=ours DURATION=8s BASE_BIN=... benches/http_ab.sh
#
# A is BASE_BIN, built from another checkout of the base revision:
#   git worktree add /tmp/base <rev>
#   (cd /tmp/base && CARGO_TARGET_DIR=/tmp/base/target \
#      cargo build --release -p tiered-ratelimit-benches --example bench_http)
# B is this checkout's bench_http, built here in release.
#
# Settings (environment): BASE_BIN (required; not this checkout's own build), ROUNDS (6, at least 1), MODE (inner; any of bench_http's
# modes), DURATION (6s), WARMUP (2s), CONNECTIONS (64), SERVER_CPUS (0), WRK_CPUS (1), as in
# benches/http.sh: the server has one tokio worker pinned to SERVER_CPUS and wrk one thread
# pinned to WRK_CPUS (without taskset, nothing is pinned).
set -euo pipefail

die() { echo "http_ab.sh: $*" >&2; exit 1; }
[ -n "${BASE_BIN:-}" ] || die "set BASE_BIN to the base build's bench_http (see the header)"
[ -x "$BASE_BIN" ] || die "BASE_BIN=$BASE_BIN is not an executable"
BASE_BIN=$(realpath "$BASE_BIN")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v wrk >/dev/null || die "wrk is missing (Debian: apt-get install wrk)"
ROUNDS=${ROUNDS:-6}
[ "$ROUNDS" -ge 1 ] || die "ROUNDS must be at least 1"
MODE=${MODE:-inner}
DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-64}
server_pin=()
wrk_pin=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_pin=(taskset -c "${SERVER_CPUS:-0}")
  wrk_pin=(taskset -c "${WRK_CPUS:-1}")
fi

cargo build --release --quiet -p tiered-ratelimit-benches --example bench_http >&2
target_dir=$(scripts/target-dir.sh)
NEW_BIN=$target_dir/release/examples/bench_http
[ -x "$NEW_BIN" ] || die "no binary at $NEW_BIN"
! cmp -s "$BASE_BIN" "$NEW_BIN" || die "BASE_BIN is this checkout's own build: nothing to compare"

TMP=$(mktemp -d)
# cleanup, start_server, stop_server, cpu_seconds
. benches/http_server.sh
trap cleanup EXIT
trap 'exit 130' INT TERM

# One timed run of build `$1`'s server, in this shell (so that the exit trap knows the server):
# writes "requests/s µs-of-server-CPU-per-request" to `$2`.
serve() {
  start_server "$1" "$MODE" 1
  local addr=$ADDR
  curl -sf -H 'x-user-id: bench' "http://$addr/" >/dev/null || die "$1: GET / failed"
  local load=(-t1 -c"$CONNECTIONS" --timeout 2s -H 'x-user-id: bench' "http://$addr/")
  "${wrk_pin[@]}" wrk -d"$WARMUP" "${load[@]}" >/dev/null
  local before after
  before=$(cpu_seconds "$SERVER_PID")
  "${wrk_pin[@]}" wrk -d"$DURATION" "${load[@]}" >"$TMP/wrk.out"
  after=$(cpu_seconds "$SERVER_PID")
  stop_server
  awk -v before="$before" -v after="$after" '
    /requests in/ { n = $1 }
    /Requests\/sec/ { rps = $2 }
    /Non-2xx/ { bad += $NF }
    /Socket errors/ { errors = 1 }
    END {
      if (n == 0 || bad > 0 || errors) exit 1
      printf "%.0f %.3f\n", rps, (after - before) * 1e6 / n
    }' "$TMP/wrk.out" >"$2" || { cat "$TMP/wrk.out" >&2; die "$1: no requests, some not answered 200, or socket errors"; }
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
summary() { # the median, lowest and highest of column $1 of the rounds' ratios
  local column
  column=$(cut -d' ' -f"$1" "$TMP/ratios")
  echo "$(echo "$column" | median) (lowest $(echo "$column" | sort -g | head -1), highest $(echo "$column" | sort -g | tail -1))"
}

echo "mode $MODE, $ROUNDS rounds of $DURATION each (after $WARMUP of warm-up); A = $BASE_BIN, B = $NEW_BIN"
: >"$TMP/ratios"
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then
    serve "$BASE_BIN" "$TMP/a"
    serve "$NEW_BIN" "$TMP/b"
  else
    serve "$NEW_BIN" "$TMP/b"
    serve "$BASE_BIN" "$TMP/a"
  fi
  read -r a_rps a_cpu <"$TMP/a"
  read -r b_rps b_cpu <"$TMP/b"
  line=$(awk -v ar="$a_rps" -v ac="$a_cpu" -v br="$b_rps" -v bc="$b_cpu" 'BEGIN {
    printf "%.4f %.4f", br / ar, bc / ac }')
  echo "$line" >>"$TMP/ratios"
  read -r rps_ratio cpu_ratio <<<"$line"
  echo "round $round: A $a_rps requests/s, $a_cpu µs CPU a request; B $b_rps requests/s, $b_cpu µs; B/A throughput $rps_ratio, CPU a request $cpu_ratio"
done
echo "B/A, median of the rounds: throughput $(summary 1); server CPU a request $(summary 2)"
