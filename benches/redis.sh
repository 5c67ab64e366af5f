#!/usr/bin/env bash
# Redis throughput: checks per second of our limiter on Redis, beside redis-benchmark running
# the very same Lua script (src/store/redis/script.lua) with EVALSHA at the same concurrency.
#
#   benches/redis.sh                        # about 2 to 3.5 minutes with the defaults
#   CHECKS=50000 REPS=1 benches/redis.sh    # a quick look
#
# The script starts its own redis-server on a free loopback port (--save "" --appendonly no),
# killed on exit. For each concurrency (1, 16, 64) and each of REPS rounds, interleaved:
#
#   ours             benches/examples/bench_redis.rs: RateLimiter::connect(config) with the
#                    Redis URL, three tiers on, limits 2^40 in a 1 s window (never reached),
#                    check i by user i % 10000, from N tokio tasks sharing one limiter (one fred
#                    client: one connection, commands of concurrent tasks pipelined on it);
#   redis-benchmark  EVALSHA <sha> 3 rate_limit:user:__rand_int__ rate_limit:endpoint:/bench
#                    rate_limit:global "" 1000000 1 2^40 2^40 2^40, with -c N connections,
#                    -P 1 (no pipelining), -r 10000 (10,000 users). ARGV[1] "" makes the
#                    script read Redis TIME.
#
# Both start on an empty database (FLUSHALL), run WARMUP untimed checks, then CHECKS timed ones.
# During our run INFO commandstats gives the round trips per check (EVALSHA calls / checks).
# Each run checks that no call failed and that every check was admitted and served by Redis.
#
# Pinning (2 CPUs or more, with taskset): redis-server on REDIS_CPUS (default core 0), the
# client (ours with WORKERS tokio worker threads, default 1, or redis-benchmark, single
# threaded) on CLIENT_CPUS (default core 1). The csv gives the CPU each used (in cores) during
# the timed run: a side near 1.0 was the bottleneck.
#
# Writes the table to stdout and benches/results/redis.md, every run to benches/results/redis.csv.
# Settings (environment): CHECKS (200000), WARMUP (20000), CONCURRENCY ("1 16 64"), REPS (3),
# USERS (10000), WORKERS (1), REDIS_CPUS (0), CLIENT_CPUS (1), TIME_SOURCE (app: our limiter
# passes now; redis: it sends "" like redis-benchmark), TIMEOUT (1s: our Redis command timeout;
# a slower check would fall back to memory and fail the run), RESULTS (benches/results).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

CHECKS=${CHECKS:-200000}
WARMUP=${WARMUP:-20000}
CONCURRENCY=${CONCURRENCY:-1 16 64}
REPS=${REPS:-3}
USERS=${USERS:-10000}
WORKERS=${WORKERS:-1}
REDIS_CPUS=${REDIS_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
TIME_SOURCE=${TIME_SOURCE:-app}
TIMEOUT=${TIMEOUT:-1s}
RESULTS=${RESULTS:-$ROOT/benches/results}
HUGE=1099511627776 # 2^40
WINDOW_US=1000000  # 1 s

log() { echo "redis.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- tools -------------------------------------------------------------------------------
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 ||
    ! command -v redis-benchmark >/dev/null 2>&1; then
    log "installing redis-server and redis-tools with apt-get"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq redis-server redis-tools >&2
fi
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done

redis_pin=()
client_pin=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    redis_pin=(taskset -c "$REDIS_CPUS")
    client_pin=(taskset -c "$CLIENT_CPUS")
    pinning="redis-server on CPU $REDIS_CPUS, client on CPU $CLIENT_CPUS (taskset)"
else
    pinning="none (no taskset, or fewer than 2 CPUs)"
fi

# --- build -------------------------------------------------------------------------------
log "building benches/examples/bench_redis (release)"
cargo build --release --quiet -p tiered-ratelimit-benches --example bench_redis >&2
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN=$target_dir/release/examples/bench_redis
[ -x "$BIN" ] || die "no binary at $BIN"

# --- redis-server ------------------------------------------------------------------------
TMP=$(mktemp -d)
REDIS_PID=
cleanup() {
    if [ -n "$REDIS_PID" ] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill -TERM "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=
for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    # Something already answers there: try another port.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    "${redis_pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$TMP" --logfile "$TMP/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 100); do
        if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ]; then
            PORT=$port
            break 2
        fi
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.05
    done
    kill -TERM "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=
done
[ -n "$PORT" ] || die "could not start redis-server on a free port"
cli() { redis-cli -p "$PORT" "$@"; }
log "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT"

SHA=$(cli -x SCRIPT LOAD <src/store/redis/script.lua)
[[ $SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD failed: $SHA"
# -x sends the file byte for byte, so this is the sha our limiter uses (Script::from_lua).
if command -v sha1sum >/dev/null 2>&1; then
    file_sha=$(sha1sum src/store/redis/script.lua | cut -d" " -f1)
    [ "$SHA" = "$file_sha" ] || die "loaded sha $SHA is not the file's $file_sha"
fi

# --- helpers -----------------------------------------------------------------------------
# A field of INFO commandstats: stat name (evalsha), field (calls, failed_calls, ...).
cmdstat() {
    cli INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' -v s="cmdstat_$1" -v f="$2" '
            $1 == s { for (i = 2; i < NF; i += 2) if ($i == f) v = $(i + 1) }
            END { print v + 0 }'
}
errors_total() {
    cli INFO errorstats | tr -d '\r' | awk -F'[:,=]' '/^errorstat_/ { n += $3 } END { print n + 0 }'
}
# CPU seconds (user + system) used so far by process $1.
cpu_seconds() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"
}
now() { date +%s.%N; }
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b > 0) printf f, a / b; else print "n/a" }'; }
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2
    }'
}
# Runs a command, keeping its stdout in $1 and its stderr in $1.err; CLIENT_CPU is set to the
# CPU seconds it used (bash's time: the children's user + system time).
timed_client() {
    local out=$1
    shift
    local TIMEFORMAT='%3U %3S'
    { time "$@" >"$out" 2>"$out.err"; } 2>"$TMP/time" || {
        cat "$out" "$out.err" >&2
        return 1
    }
    CLIENT_CPU=$(awk '{ print $1 + $2 }' "$TMP/time")
}

bench_args=(3 rate_limit:user:__rand_int__ rate_limit:endpoint:/bench rate_limit:global
    "" "$WINDOW_US" 1 "$HUGE" "$HUGE" "$HUGE")
redis_benchmark() { # concurrency, requests
    "${client_pin[@]}" redis-benchmark -p "$PORT" -c "$1" -n "$2" -P 1 -r "$USERS" --csv \
        EVALSHA "$SHA" "${bench_args[@]}"
}

# --- runs --------------------------------------------------------------------------------
mkdir -p "$RESULTS"
CSV=$TMP/redis.csv
echo "run,client,concurrency,rep,checks,checks_per_sec,p50_us,p99_us,evalsha_per_check,client_cpu_us_per_check,redis_cpu_us_per_check,redis_cpu" >"$CSV"
log "$REPS x concurrency {$CONCURRENCY} x {ours, redis-benchmark}: $WARMUP warm-up +" \
    "$CHECKS timed checks each; pinning: $pinning"

# Checks that Redis ran every EVALSHA without error since the last CONFIG RESETSTAT.
no_failures() {
    local failed
    failed=$(($(cmdstat evalsha failed_calls) + $(cmdstat evalsha rejected_calls) + $(errors_total)))
    [ "$failed" -eq 0 ] || die "$1: $failed EVALSHA calls failed in Redis"
}

run=0
for rep in $(seq "$REPS"); do
    for c in $CONCURRENCY; do
        # ours: warm-up and timed checks in one process; Redis CPU and EVALSHA calls over both.
        run=$((run + 1))
        cli FLUSHALL >/dev/null
        cli CONFIG RESETSTAT >/dev/null
        r0=$(cpu_seconds "$REDIS_PID")
        t0=$(now)
        timed_client "$TMP/ours.out" "${client_pin[@]}" "$BIN" --redis "redis://127.0.0.1:$PORT" \
            --concurrency "$c" --checks "$CHECKS" --warmup "$WARMUP" --users "$USERS" \
            --window 1s --time-source "$TIME_SOURCE" --timeout "$TIMEOUT" --workers "$WORKERS" ||
            die "ours, concurrency $c: the client failed"
        t1=$(now)
        r1=$(cpu_seconds "$REDIS_PID")
        no_failures "ours, concurrency $c"
        line=$(grep '^result ' "$TMP/ours.out") || die "ours: no result line"
        rps=$(sed -n 's/.* checks_per_sec=\([^ ]*\).*/\1/p' <<<"$line")
        p50=$(sed -n 's/.* p50_us=\([^ ]*\).*/\1/p' <<<"$line")
        p99=$(sed -n 's/.* p99_us=\([^ ]*\).*/\1/p' <<<"$line")
        total=$(sed -n 's/.* total_checks=\([^ ]*\).*/\1/p' <<<"$line")
        evalsha=$(cmdstat evalsha calls)
        per_check=$(div "$evalsha" "$total" %.3f)
        client_us=$(awk -v a="$CLIENT_CPU" -v n="$total" 'BEGIN { printf "%.2f", a / n * 1e6 }')
        redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$total" 'BEGIN { printf "%.2f", (b - a) / n * 1e6 }')
        redis_cpu=$(awk -v a="$r0" -v b="$r1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) / (e - s) }')
        echo "$run,ours,$c,$rep,$CHECKS,$rps,$p50,$p99,$per_check,$client_us,$redis_us,$redis_cpu" >>"$CSV"
        log "run $run ours c=$c: $rps checks/s, p99 $p99 µs; $evalsha EVALSHA / $total checks =" \
            "$per_check; CPU µs per check: client $client_us, redis $redis_us"

        # redis-benchmark: a warm-up run, then the timed one; Redis CPU over the timed one.
        run=$((run + 1))
        cli FLUSHALL >/dev/null
        if [ "$WARMUP" -gt 0 ]; then
            redis_benchmark "$c" "$WARMUP" >/dev/null 2>"$TMP/rb.err" ||
                die "redis-benchmark warm-up failed: $(cat "$TMP/rb.err")"
        fi
        cli CONFIG RESETSTAT >/dev/null
        r0=$(cpu_seconds "$REDIS_PID")
        t0=$(now)
        timed_client "$TMP/rb.out" redis_benchmark "$c" "$CHECKS" ||
            die "redis-benchmark, concurrency $c failed"
        t1=$(now)
        r1=$(cpu_seconds "$REDIS_PID")
        no_failures "redis-benchmark, concurrency $c"
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
        read -r rps p50 p99 < <(awk -F'","' 'NR == 2 {
            printf "%s %.0f %.0f\n", $2, $5 * 1000, $7 * 1000 }' "$TMP/rb.out")
        [ -n "${rps:-}" ] || die "redis-benchmark: no csv line: $(cat "$TMP/rb.out" "$TMP/rb.out.err")"
        evalsha=$(cmdstat evalsha calls)
        [ "$evalsha" -eq "$CHECKS" ] || die "redis-benchmark: $evalsha EVALSHA calls, not $CHECKS"
        client_us=$(awk -v a="$CLIENT_CPU" -v n="$CHECKS" 'BEGIN { printf "%.2f", a / n * 1e6 }')
        redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$CHECKS" 'BEGIN { printf "%.2f", (b - a) / n * 1e6 }')
        redis_cpu=$(awk -v a="$r0" -v b="$r1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) / (e - s) }')
        echo "$run,redis-benchmark,$c,$rep,$CHECKS,$rps,$p50,$p99,1.000,$client_us,$redis_us,$redis_cpu" >>"$CSV"
        log "run $run redis-benchmark c=$c: $rps EVALSHA/s, p99 $p99 µs; CPU µs per check:" \
            "client $client_us, redis $redis_us"
    done
done

# Ours really records in Redis: 100 checks, 100 entries in the global set.
cli FLUSHALL >/dev/null
"$BIN" --redis "redis://127.0.0.1:$PORT" --concurrency 4 --checks 100 --warmup 0 \
    --users "$USERS" >/dev/null || die "final check failed"
[ "$(cli ZCARD rate_limit:global)" -eq 100 ] || die "ours did not record 100 entries in rate_limit:global"

# --- report ------------------------------------------------------------------------------
col() { # client, concurrency, column -> values
    awk -F, -v k="$1" -v c="$2" -v n="$3" 'NR > 1 && $2 == k && $3 == c { print $n }' "$CSV"
}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
redis_version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
{
    echo "# Redis: our limiter vs redis-benchmark on the same script"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit, $(nproc) CPUs ($cpu_model), redis-server $redis_version."
    echo "\`benches/redis.sh\`: src/store/redis/script.lua (sha $SHA), 3 tiers, 1 s window, limits never"
    echo "reached, $USERS users; $WARMUP warm-up then $CHECKS timed checks per run, $REPS runs per"
    echo "cell interleaved, medians; our time source: $TIME_SOURCE. Pinning: $pinning."
    echo
    echo "| concurrency | ours checks/s | redis-benchmark EVALSHA/s | ours / redis-benchmark | p99 µs, ours | p99 µs, redis-benchmark | Redis CPU µs per check, ours | Redis CPU µs per check, redis-benchmark | client CPU µs per check, ours | client CPU µs per check, redis-benchmark | EVALSHA per check, ours |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
        ours=$(col ours "$c" 6 | median)
        rb=$(col redis-benchmark "$c" 6 | median)
        printf '| %s | %.0f | %.0f | %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %s |\n' \
            "$c" "$ours" "$rb" "$(div "$ours" "$rb")" \
            "$(col ours "$c" 8 | median)" "$(col redis-benchmark "$c" 8 | median)" \
            "$(col ours "$c" 11 | median)" "$(col redis-benchmark "$c" 11 | median)" \
            "$(col ours "$c" 10 | median)" "$(col redis-benchmark "$c" 10 | median)" \
            "$(col ours "$c" 9 | median)"
    done
    echo
    echo "Ours: one RateLimiter (one fred connection; the commands of concurrent checks are"
    echo "pipelined on it) driven by N tokio tasks on $WORKERS worker thread(s). redis-benchmark:"
    echo "N connections, one command in flight on each (-P 1). EVALSHA per check: INFO"
    echo "commandstats over our run, warm-up included. CPU per check: user + system CPU time of"
    echo "redis-server, and of the client process, divided by the checks (for ours over its whole"
    echo "process, warm-up and connection included). Raw runs: benches/results/redis.csv (redis_cpu:"
    echo "redis-server's CPU use in cores; near 1 = Redis was the bottleneck)."
} >"$TMP/redis.md"
cp "$CSV" "$RESULTS/redis.csv"
cp "$TMP/redis.md" "$RESULTS/redis.md"
cat "$RESULTS/redis.md"
