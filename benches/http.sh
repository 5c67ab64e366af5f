#!/usr/bin/env bash
# HTTP load comparison: an axum hello-world (GET / -> "hello") served ten ways, one after
# the other, each as its own process on a free loopback port:
#
#   bare      no rate limiting (the baseline)
#   headers   no rate limiting; the handler writes the two headers ours sends (the baseline
#             of the issue-11 target: ours >= 0.97x of it)
#   ours      RateLimitLayer, in memory, three tiers, limits never reached (1 s window)
#   inner     ours with .inner_body(): its responses carry axum's own body (not boxed again)
#   inner_handler  inner on the handler (axum's Handler::layer) instead of with route_layer
#             (not in the default MODES)
#   governor  tower_governor 0.7 keyed by the x-user-id header, a quota never reached
#   governor_headers  governor with use_headers(): it writes two headers of its own
#             (x-ratelimit-limit, x-ratelimit-remaining), as ours writes two
#   governor_handler  governor on the handler (not in the default MODES)
#   floor     a layer that checks nothing: reads what ours reads (the user id, the route) and
#             writes the same two headers as static values; the least a limiter that reads
#             those and writes those can cost in ours' place (not in the default MODES)
#   floor_handler  floor on the handler (not in the default MODES)
#
# (benches/examples/bench_http.rs). wrk loads each from a second process; the modes run interleaved
# (bare, headers, ours, ..., bare, headers, ...) REPS times, and the table gives each mode's
# median requests/s and p99 latency, and the ratios of ours and inner to the others: of the
# medians, and the median (with the lowest and highest) of the rounds' own ratios, which the
# machine's drift from round to round moves less. With inner and headers or governor among the
# modes it ends with issue 11's target 2 judged on those rounds' ratios: met or not met only
# when a 95% confidence interval of their median (distribution-free: order statistics) lies
# wholly on one side of the target, else undecided, which more rounds (REPS) may settle. It
# takes at least 6 rounds (REPS=6) to judge at all; with fewer it says so and judges nothing.
#
#   benches/http.sh                       # about 4 minutes with the defaults
#   DURATION=5s REPS=1 benches/http.sh    # a quick look
#
# Fairness on a small machine: the server runs with WORKERS tokio worker threads (default 1)
# pinned to SERVER_CPUS (default core 0) and wrk with one thread pinned to WRK_CPUS (default
# core 1), so the load generator never steals the server's CPU. The csv's server_cpu column
# is the server's CPU use during the timed run, in cores: close to WORKERS means the server
# was the bottleneck (what we want to measure); well below means wrk was. Without taskset or
# with fewer than two CPUs, nothing is pinned.
#
# Writes the table to stdout and benches/results/http.md, every run to benches/results/http.csv.
# Settings (environment): DURATION (10s), WARMUP (2s), CONNECTIONS (64), REPS (3), WORKERS (1),
# SERVER_CPUS (0), WRK_CPUS (1), MODES (six of the ten: "bare headers ours inner governor
# governor_headers"), RESULTS
# (benches/results).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-64}
REPS=${REPS:-3}
WORKERS=${WORKERS:-1}
SERVER_CPUS=${SERVER_CPUS:-0}
WRK_CPUS=${WRK_CPUS:-1}
MODES=${MODES:-bare headers ours inner governor governor_headers}
RESULTS=${RESULTS:-$ROOT/benches/results}
USER_HEADER='x-user-id: bench'

log() { echo "http.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- wrk ---------------------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
    log "installing wrk with apt-get"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq wrk >&2
fi
command -v wrk >/dev/null 2>&1 || die "wrk is not installed"

# --- pinning -----------------------------------------------------------------------------
server_pin=()
wrk_pin=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    server_pin=(taskset -c "$SERVER_CPUS")
    wrk_pin=(taskset -c "$WRK_CPUS")
    pinning="server on CPU $SERVER_CPUS, wrk on CPU $WRK_CPUS (taskset)"
else
    pinning="none (no taskset, or fewer than 2 CPUs)"
fi

# --- build -------------------------------------------------------------------------------
log "building benches/examples/bench_http (release)"
cargo build --release --quiet -p tiered-ratelimit-benches --example bench_http >&2
target_dir=$(scripts/target-dir.sh)
BIN=$target_dir/release/examples/bench_http
[ -x "$BIN" ] || die "no binary at $BIN"

# --- helpers -----------------------------------------------------------------------------
TMP=$(mktemp -d)
# cleanup, start_server, stop_server, cpu_seconds
. benches/http_server.sh
trap cleanup EXIT
trap 'exit 130' INT TERM

run_wrk() { # duration, output file
    "${wrk_pin[@]}" wrk -t1 -c"$CONNECTIONS" -d"$1" --timeout 2s --latency \
        -H "$USER_HEADER" "http://$ADDR/" >"$2"
}

# Fields of a wrk report: requests/s, p50 µs, p99 µs, requests, non-2xx, socket errors.
parse_wrk() {
    awk '
        function us(v) {
            if (v ~ /us$/) { sub(/us$/, "", v); return v + 0 }
            if (v ~ /ms$/) { sub(/ms$/, "", v); return v * 1000 }
            if (v ~ /m$/)  { sub(/m$/, "", v);  return v * 60000000 }
            if (v ~ /s$/)  { sub(/s$/, "", v);  return v * 1000000 }
            return v + 0
        }
        /Requests\/sec:/             { rps = $2 }
        /^ +50%/                     { p50 = us($2) }
        /^ +99%/                     { p99 = us($2) }
        / requests in /              { total = $1 }
        /Non-2xx or 3xx responses:/  { non2xx = $NF }
        /Socket errors:/ {
            gsub(/,/, ""); errors = $4 + $6 + $8 + $10
        }
        END { printf "%s,%.0f,%.0f,%s,%d,%d\n", rps, p50, p99, total, non2xx, errors }
    ' "$1"
}

median() { # numbers on stdin -> their median
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2
    }'
}

# --- runs --------------------------------------------------------------------------------
mkdir -p "$RESULTS"
CSV=$TMP/http.csv
echo "run,mode,rep,requests_per_sec,p50_us,p99_us,requests,non_2xx,socket_errors,server_cpu,server_cpu_us_per_request" >"$CSV"
runs=0
for mode in $MODES; do
    case $mode in bare | headers | ours | inner | inner_handler | governor | governor_headers | governor_handler | floor | floor_handler) ;;
    *) die "unknown mode $mode" ;;
    esac
    runs=$((runs + 1))
done
log "$REPS x {$MODES}: wrk -t1 -c$CONNECTIONS, warm-up $WARMUP, timed $DURATION; pinning: $pinning"

run=0
for rep in $(seq "$REPS"); do
    for mode in $MODES; do
        run=$((run + 1))
        start_server "$BIN" "$mode" "$WORKERS"
        # The status, headers and body once, so a broken server fails loudly: every mode but
        # bare and governor must send a remaining count.
        body=$(curl -sf -D "$TMP/head.txt" -H "$USER_HEADER" "http://$ADDR/") ||
            die "$mode: GET / failed"
        [ "$body" = hello ] || die "$mode: GET / answered '$body'"
        case $mode in
        bare | governor) ;;
        *) grep -qi '^x-ratelimit-remaining:' "$TMP/head.txt" ||
            die "$mode: GET / sent no x-ratelimit-remaining header" ;;
        esac
        run_wrk "$WARMUP" "$TMP/warmup.txt"
        cpu0=$(cpu_seconds "$SERVER_PID")
        t0=$(date +%s.%N)
        run_wrk "$DURATION" "$TMP/wrk.txt"
        t1=$(date +%s.%N)
        cpu1=$(cpu_seconds "$SERVER_PID")
        stop_server
        fields=$(parse_wrk "$TMP/wrk.txt")
        server_cpu=$(awk -v a="$cpu0" -v b="$cpu1" -v s="$t0" -v e="$t1" \
            'BEGIN { printf "%.2f", (b - a) / (e - s) }')
        IFS=, read -r rps _ p99 _ non2xx errors <<<"$fields"
        cpu_per_request=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$(cut -d, -f4 <<<"$fields")" \
            'BEGIN { if (n > 0) printf "%.2f", (b - a) / n * 1e6; else print "nan" }')
        [ -n "$rps" ] || {
            cat "$TMP/wrk.txt" >&2
            die "$mode: could not read wrk's report"
        }
        if [ "$non2xx" -ne 0 ]; then
            cat "$TMP/wrk.txt" >&2
            die "$mode: $non2xx responses were not 2xx: a limit was reached or the server failed"
        fi
        [ "$errors" -eq 0 ] || log "warning: $mode run $rep had $errors socket errors"
        echo "$run,$mode,$rep,$fields,$server_cpu,$cpu_per_request" >>"$CSV"
        log "run $run/$((REPS * runs)) $mode: $rps req/s, p99 ${p99} µs, server CPU $server_cpu cores, $cpu_per_request µs/request"
    done
done

# --- report ------------------------------------------------------------------------------
col() { # mode, column number -> that column's values for the mode
    awk -F, -v m="$1" -v c="$2" 'NR > 1 && $2 == m { print $c }' "$CSV"
}
declare -A RPS P99 CPU
for mode in $MODES; do
    RPS[$mode]=$(col "$mode" 4 | median)
    P99[$mode]=$(col "$mode" 6 | median)
    CPU[$mode]=$(col "$mode" 11 | median)
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ratios() { # mode a, mode b, column -> the rounds' own ratios a / b, one a line
    awk -F, -v a="$1" -v b="$2" -v c="$3" '
        NR > 1 && $2 == a { x[$3] = $c }
        NR > 1 && $2 == b { y[$3] = $c }
        END { for (r in x) if ((r in y) && y[r] > 0) print x[r] / y[r] }' "$CSV"
}
paired() { # mode a, mode b, column -> "median (lowest-highest)" of the rounds' ratios a / b
    local r
    r=$(ratios "$1" "$2" "$3")
    if [ -z "$r" ]; then echo "n/a"; return; fi
    printf '%.3f (%.2f-%.2f)' "$(median <<<"$r")" "$(sort -g <<<"$r" | head -1)" \
        "$(sort -g <<<"$r" | tail -1)"
}
ci95() { # numbers on stdin -> "lowest highest": a 95% confidence interval of their median
    # that assumes nothing of their distribution: the k-th smallest and the k-th largest, k the
    # largest with P(Binomial(n, 1/2) < k) <= 0.025 (n >= 6; 7th and 18th of 24 rounds).
    sort -g | awk '{ v[NR] = $1 } END {
        n = NR; cdf = 0; k = 0; c = 1; p = 0.5 ^ n
        for (i = 0; i <= n; i++) {
            if (i > 0) c = c * (n - i + 1) / i
            if (cdf + c * p > 0.025) break
            cdf += c * p; k = i + 1
        }
        if (k < 1) print "nan nan"; else print v[k], v[n + 1 - k]
    }'
}
verdict() { # label, mode a, mode b, column, target, "at_least" | "at_most"
    # Whether the rounds' ratios a / b meet the target: "met" when the whole 95% interval of
    # their median is on the target's side, "not met" when it is wholly on the other, else
    # "undecided" (the machine's noise is larger than the margin: more rounds may decide).
    local r lo hi word
    r=$(ratios "$2" "$3" "$4")
    [ "$(wc -l <<<"$r")" -ge 6 ] || { echo "- $1: fewer than 6 rounds, no verdict"; return; }
    read -r lo hi <<<"$(ci95 <<<"$r")"
    word=$(awk -v lo="$lo" -v hi="$hi" -v t="$5" -v way="$6" 'BEGIN {
        if (way == "at_least") print (lo >= t ? "met" : (hi < t ? "not met" : "undecided"));
        else print (hi <= t ? "met" : (lo > t ? "not met" : "undecided"))
    }')
    printf -- '- %s: median of the rounds %.3f, 95%% interval %.3f-%.3f: **%s**\n' "$1" \
        "$(median <<<"$r")" "$lo" "$hi" "$word"
}
compare() { # label, mode a, mode b
    echo "- $1: $(ratio "${RPS[$2]}" "${RPS[$3]}") of the throughput," \
        "$(ratio "${P99[$2]}" "${P99[$3]}")x the p99 latency," \
        "$(ratio "${CPU[$2]}" "${CPU[$3]}")x the server CPU per request" \
        "($(awk -v a="${CPU[$2]}" -v b="${CPU[$3]}" 'BEGIN { printf "%+.2f", a - b }') µs);" \
        "round by round (each round runs every mode once, back to back): throughput" \
        "$(paired "$2" "$3" 4), p99 $(paired "$2" "$3" 6), server CPU per request $(paired "$2" "$3" 11)"
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
    echo "# HTTP load: bare axum vs RateLimitLayer vs tower_governor"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit, $(nproc) CPUs ($cpu_model)."
    echo "\`benches/http.sh\`: GET / (\"hello\"), wrk -t1 -c$CONNECTIONS --latency, warm-up $WARMUP then"
    echo "$DURATION timed, $REPS runs per mode interleaved, each in a fresh server process with"
    echo "$WORKERS tokio worker thread(s); pinning: $pinning. Medians over the runs."
    echo
    echo "| mode | requests/s | p99 latency (µs) | server CPU per request (µs) | requests/s per run |"
    echo "|---|---:|---:|---:|---|"
    for mode in $MODES; do
        runs_list=$(col "$mode" 4 | awk '{ printf "%s%.0f", (NR > 1 ? ", " : ""), $1 }')
        printf '| %s | %.0f | %.0f | %.2f | %s |\n' "$mode" "${RPS[$mode]}" "${P99[$mode]}" \
            "${CPU[$mode]}" "$runs_list"
    done
    if [ -n "${RPS[ours]:-}" ] || [ -n "${RPS[inner]:-}" ]; then echo; fi
    if [ -n "${RPS[ours]:-}" ]; then
        if [ -n "${RPS[bare]:-}" ]; then compare "ours / bare" ours bare; fi
        if [ -n "${RPS[headers]:-}" ]; then compare "ours / headers" ours headers; fi
        if [ -n "${RPS[governor]:-}" ]; then compare "ours / governor" ours governor; fi
    fi
    if [ -n "${RPS[inner]:-}" ]; then
        if [ -n "${RPS[ours]:-}" ]; then compare "inner / ours" inner ours; fi
        if [ -n "${RPS[headers]:-}" ]; then compare "inner / headers" inner headers; fi
        if [ -n "${RPS[governor]:-}" ]; then compare "inner / governor" inner governor; fi
        if [ -n "${RPS[governor_headers]:-}" ]; then
            compare "inner / governor_headers" inner governor_headers
        fi
        if [ -n "${RPS[inner_handler]:-}" ]; then
            compare "inner_handler / inner" inner_handler inner
        fi
    fi
    if [ -n "${RPS[inner]:-}" ] && { [ -n "${RPS[headers]:-}" ] || [ -n "${RPS[governor]:-}" ]; }; then
        echo
        echo "Issue 11, target 2, on the rounds' own ratios (inner, the layer with axum's body):"
        if [ -n "${RPS[headers]:-}" ]; then
            verdict "throughput, inner / headers >= 0.97" inner headers 4 0.97 at_least
        fi
        if [ -n "${RPS[governor]:-}" ]; then
            verdict "throughput, inner / governor >= 1.0" inner governor 4 1.0 at_least
            verdict "p99 latency, inner / governor <= 1.0" inner governor 6 1.0 at_most
        fi
        # The same targets on the server's CPU a request (1 / throughput when the server is
        # the bottleneck): 0.97x the throughput is 1 / 0.97 = 1.031x the CPU.
        if [ -n "${RPS[headers]:-}" ]; then
            verdict "server CPU a request, inner / headers <= 1.031" inner headers 11 1.031 at_most
        fi
        if [ -n "${RPS[governor]:-}" ]; then
            verdict "server CPU a request, inner / governor <= 1.0" inner governor 11 1.0 at_most
        fi
    fi
    if [ -n "${RPS[floor]:-}" ] && { [ -n "${RPS[headers]:-}" ] || [ -n "${RPS[governor]:-}" ]; }; then
        echo
        echo "The same targets for the floor (a layer that reads the user id and the route, checks"
        echo "nothing and writes the two headers as static values): what it misses, no limiter that"
        echo "reads those and writes those headers can meet in its place."
        if [ -n "${RPS[headers]:-}" ]; then
            verdict "throughput, floor / headers >= 0.97" floor headers 4 0.97 at_least
            verdict "server CPU a request, floor / headers <= 1.031" floor headers 11 1.031 at_most
        fi
        if [ -n "${RPS[governor]:-}" ]; then
            verdict "throughput, floor / governor >= 1.0" floor governor 4 1.0 at_least
            verdict "server CPU a request, floor / governor <= 1.0" floor governor 11 1.0 at_most
            verdict "p99 latency, floor / governor <= 1.0" floor governor 6 1.0 at_most
        fi
        if [ -n "${RPS[inner]:-}" ]; then compare "inner / floor" inner floor; fi
    fi
    echo
    echo "ours checks three tiers (user, endpoint, global sliding logs) and adds two headers;"
    echo "inner is ours with .inner_body() (its responses carry axum's own body); inner_handler"
    echo "is inner on the handler (axum's Handler::layer) instead of with route_layer."
    echo "tower_governor checks one GCRA cell keyed by the same x-user-id header and adds none;"
    echo "governor_headers is tower_governor with use_headers(), adding two headers of its own."
    echo "floor checks nothing: it reads the user id and the route and writes the two headers as"
    echo "static values (floor_handler: on the handler); governor_handler is tower_governor on the"
    echo "handler."
    echo "Server CPU per request (user + system CPU time of the server process over the timed run,"
    echo "divided by the requests served) is the figure least disturbed by other load on the"
    echo "machine. Raw runs: ${RESULTS#"$ROOT"/}/http.csv (server_cpu: the server's CPU use in cores"
    echo "during the timed run; well under $WORKERS means wrk, or another process on the server's"
    echo "CPU, held it back)."
} >"$TMP/http.md"
cp "$CSV" "$RESULTS/http.csv"
cp "$TMP/http.md" "$RESULTS/http.md"
cat "$RESULTS/http.md"
