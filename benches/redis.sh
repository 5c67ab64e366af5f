#!/usr/bin/env bash
# Redis throughput: checks per second of our limiter on Redis, beside redis-benchmark running
# the very same Lua script (src/store/redis/script.lua), and the lean baseline script
# (benches/lean.lua), with EVALSHA at the same concurrency.
#
#   benches/redis.sh                                   # about 4 to 6 minutes with the defaults
#   CHECKS=50000 REPS=1 benches/redis.sh               # a quick look
#   CONCURRENCY=64 LIMITERS="1 4" CLUSTER=1 benches/redis.sh   # many instances, a cluster
#   BASE_SCRIPT=/tmp/old.lua benches/redis.sh          # also an older script, e.g.
#                                     # git show main:src/store/redis/script.lua >/tmp/old.lua
#   BASE_BIN=/tmp/bench_redis_old benches/redis.sh     # also ours as built at another commit
#
# The script starts its own redis-server on a free loopback port (--save "" --appendonly no),
# killed on exit. For each concurrency (1, 16, 64) and each of REPS rounds, interleaved:
#
#   ours             benches/examples/bench_redis.rs: RateLimiter::connect(config) with the
#                    Redis URL, three tiers on, limits 2^40 in a 1 s window (never reached),
#                    check i by user i % 10000, from N tokio tasks sharing one limiter (one fred
#                    client: one connection, commands of concurrent tasks pipelined on it); with
#                    LIMITERS="1 4", also four limiters (four connections, as four app
#                    instances) sharing the N tasks: row ours-x4;
#   ours-cluster     (CLUSTER=1) the same against a three-master Redis Cluster the script
#                    starts (redis-cli --cluster create), all masters on REDIS_CPUS;
#   rb-lean          redis-benchmark EVALSHA of benches/lean.lua, the baseline: per tier
#                    ZREMRANGEBYSCORE and ZCARD, deny on the first full tier, else ZADD +
#                    PEXPIRE in every tier (no facts, no costs, no clamp);
#   rb-script        redis-benchmark EVALSHA of src/store/redis/script.lua;
#   rb-base          (BASE_SCRIPT=path) redis-benchmark EVALSHA of that script;
#   ours-base        (BASE_BIN=path) benches/examples/bench_redis built at another commit (with the
#                    script of that commit), run like ours (with LIMITERS="1 4", also row ours-base-x4);
#
# redis-benchmark sends EVALSHA <sha> 3 rate_limit:user:__rand_int__ rate_limit:endpoint:/bench
# rate_limit:global "" 1000000 COST 2^40 2^40 2^40, with -c N connections, -P 1 (no pipelining),
# -r 10000 (10,000 users); to our script (a batch of one check), "" 1000000 COST 3 0 2^40 2^40
# 2^40. ARGV[1] "" makes the script read Redis TIME. Ours batches the checks that wait at the
# same moment (src/store/redis/batch.rs): EVALSHA per check is then below 1, and each check is
# still in exactly one EVALSHA.
#
# Every run starts on an empty database (FLUSHALL), runs WARMUP untimed checks, then CHECKS
# timed ones. INFO commandstats gives the round trips per check (EVALSHA calls / checks) and
# usec_per_call of EVALSHA: the time Redis spent inside the script, per call, without the
# network. Each run checks that no call failed and that every check was admitted and served by
# Redis.
#
# Pinning (2 CPUs or more, with taskset): redis-server on REDIS_CPUS (default core 0), the
# client (ours with WORKERS tokio worker threads, default 1, or redis-benchmark, single
# threaded) on CLIENT_CPUS (default core 1). The csv gives the CPU each used (in cores) during
# the timed run: a side near 1.0 was the bottleneck.
#
# Writes the table to stdout and benches/results/redis.md, every run to benches/results/redis.csv.
# Settings (environment): CHECKS (200000), WARMUP (20000), CONCURRENCY ("1 16 64"), REPS (3),
# USERS (10000), WORKERS (1), LIMITERS ("1"), CLUSTER (0), BASE_SCRIPT, BASE_BIN (none), REDIS_CPUS (0),
# CLIENT_CPUS (1), TIME_SOURCE (app: our limiter passes now; redis: it sends "" like
# redis-benchmark), COST (1: units per check, ours and redis-benchmark), TIMEOUT (1s: our Redis command timeout;
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
LIMITERS=${LIMITERS:-1}
CLUSTER=${CLUSTER:-0}
BASE_SCRIPT=${BASE_SCRIPT:-}
BASE_BIN=${BASE_BIN:-}
COST=${COST:-1}
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
target_dir=$(scripts/target-dir.sh)
BIN=$target_dir/release/examples/bench_redis
[ -x "$BIN" ] || die "no binary at $BIN"

# --- redis-server ------------------------------------------------------------------------
TMP=$(mktemp -d)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a pinned redis-server on a free port with extra arguments; sets STARTED_PORT and
# STARTED_PID.
start_redis() {
    local port dir pid
    for _ in $(seq 20); do
        port=$((20000 + RANDOM % 40000))
        # Something already answers there: try another port.
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        dir=$TMP/redis-$port
        mkdir -p "$dir"
        "${redis_pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" \
            --appendonly no --dir "$dir" --logfile "$dir/redis.log" "$@" &
        pid=$!
        PIDS+=("$pid")
        for _ in $(seq 100); do
            if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ]; then
                STARTED_PORT=$port
                STARTED_PID=$pid
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    return 1
}

start_redis || die "could not start redis-server on a free port"
PORT=$STARTED_PORT
REDIS_PID=$STARTED_PID
cli() { redis-cli -p "$PORT" "$@"; }
log "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT"

# Loads a script file on port $1; prints its sha, checked against the file's.
load_script() {
    local sha file_sha
    sha=$(redis-cli -p "$1" -x SCRIPT LOAD <"$2")
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of $2 failed: $sha"
    # -x sends the file byte for byte, so this is the sha our limiter uses (Script::from_lua).
    if command -v sha1sum >/dev/null 2>&1; then
        file_sha=$(sha1sum "$2" | cut -d" " -f1)
        [ "$sha" = "$file_sha" ] || die "loaded sha $sha is not the file's $file_sha"
    fi
    echo "$sha"
}
SHA=$(load_script "$PORT" src/store/redis/script.lua)
LEAN_SHA=$(load_script "$PORT" benches/lean.lua)
BASE_SHA=
if [ -n "$BASE_SCRIPT" ]; then BASE_SHA=$(load_script "$PORT" "$BASE_SCRIPT"); fi

# --- the cluster (CLUSTER=1) -------------------------------------------------------------
CLUSTER_PORTS=()
CLUSTER_PIDS=()
CLUSTER_URL=
if [ "$CLUSTER" = 1 ]; then
    for _ in 1 2 3; do
        start_redis --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 1000 || die "could not start a cluster node"
        CLUSTER_PORTS+=("$STARTED_PORT")
        CLUSTER_PIDS+=("$STARTED_PID")
    done
    addrs=()
    for p in "${CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$TMP/cluster.log" 2>&1 ||
        die "redis-cli --cluster create failed: $(cat "$TMP/cluster.log")"
    for _ in $(seq 600); do
        ok=1
        for p in "${CLUSTER_PORTS[@]}"; do
            redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok || ok=0
        done
        [ "$ok" = 1 ] && break
        sleep 0.05
    done
    [ "$ok" = 1 ] || die "the cluster never reached state ok"
    CLUSTER_URL="redis-cluster://${addrs[0]}?node=${addrs[1]}&node=${addrs[2]}"
    log "cluster of three masters on ports ${CLUSTER_PORTS[*]}"
fi
# On the cluster: the master that holds a key (its index in CLUSTER_PORTS).
owner_of() {
    local slot i line
    slot=$(redis-cli -p "${CLUSTER_PORTS[0]}" CLUSTER KEYSLOT "$1")
    for i in "${!CLUSTER_PORTS[@]}"; do
        line=$(redis-cli -p "${CLUSTER_PORTS[$i]}" CLUSTER NODES | grep myself)
        for range in $(echo "$line" | cut -d" " -f9-); do
            lo=${range%-*}
            hi=${range#*-}
            if [ "$slot" -ge "$lo" ] && [ "$slot" -le "$hi" ]; then
                echo "$i"
                return
            fi
        done
    done
}

# --- helpers -----------------------------------------------------------------------------
# A field of INFO commandstats on port $1: stat name (evalsha), field (calls, usec_per_call..).
cmdstat_on() {
    redis-cli -p "$1" INFO commandstats | tr -d '\r' |
        awk -F'[:,=]' -v s="cmdstat_$2" -v f="$3" '
            $1 == s { for (i = 2; i < NF; i += 2) if ($i == f) v = $(i + 1) }
            END { print v + 0 }'
}
cmdstat() { cmdstat_on "$PORT" "$@"; }
errors_total_on() {
    redis-cli -p "$1" INFO errorstats | tr -d '\r' |
        awk -F'[:,=]' '/^errorstat_/ { n += $3 } END { print n + 0 }'
}
# CPU seconds (user + system) used so far by processes "$@".
cpu_seconds() {
    local pid
    for pid in "$@"; do cat "/proc/$pid/stat"; done |
        awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); s += ($12 + $13) / hz } END { print s }'
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

bench_keys=(3 rate_limit:user:__rand_int__ rate_limit:endpoint:/bench rate_limit:global)
# The lean script (and scripts before batching) take now, window, cost, then the limits; ours
# (a batch of one check here) takes now, window, cost, the tiers' and block keys' numbers, then
# the limits.
plain_args=("${bench_keys[@]}" "" "$WINDOW_US" "$COST" "$HUGE" "$HUGE" "$HUGE")
batch_args=("${bench_keys[@]}" "" "$WINDOW_US" "$COST" 3 0 "$HUGE" "$HUGE" "$HUGE")
batch_form() { grep -q 'decide a batch of requests' "$1"; }
script_form() { if batch_form "$1"; then echo batch; else echo plain; fi; }
SCRIPT_FORM=$(script_form src/store/redis/script.lua)
BASE_FORM=plain
if [ -n "$BASE_SCRIPT" ]; then BASE_FORM=$(script_form "$BASE_SCRIPT"); fi
redis_benchmark() { # sha, concurrency, requests, form (plain or batch)
    local args=("${plain_args[@]}")
    if [ "${4:-plain}" = batch ]; then args=("${batch_args[@]}"); fi
    "${client_pin[@]}" redis-benchmark -p "$PORT" -c "$2" -n "$3" -P 1 -r "$USERS" --csv \
        EVALSHA "$1" "${args[@]}"
}

# --- runs --------------------------------------------------------------------------------
mkdir -p "$RESULTS"
CSV=$TMP/redis.csv
echo "run,client,concurrency,rep,checks,checks_per_sec,p50_us,p99_us,evalsha_per_check,client_cpu_us_per_check,redis_cpu_us_per_check,redis_cpu,usec_per_call" >"$CSV"
clients="ours"
for l in $LIMITERS; do [ "$l" = 1 ] || clients="$clients ours-x$l"; done
[ "$CLUSTER" = 1 ] && clients="$clients ours-cluster"
if [ -n "$BASE_BIN" ]; then
    clients="$clients ours-base"
    for l in $LIMITERS; do [ "$l" = 1 ] || clients="$clients ours-base-x$l"; done
fi
clients="$clients rb-lean rb-script"
[ -n "$BASE_SHA" ] && clients="$clients rb-base"
log "$REPS x concurrency {$CONCURRENCY} x {$clients}: $WARMUP warm-up + $CHECKS timed" \
    "checks each; pinning: $pinning"

# Checks that Redis on ports "$@" ran every EVALSHA without error since CONFIG RESETSTAT.
no_failures() {
    local what=$1 failed=0 p
    shift
    for p in "$@"; do
        failed=$((failed + $(cmdstat_on "$p" evalsha failed_calls) +
            $(cmdstat_on "$p" evalsha rejected_calls) + $(errors_total_on "$p")))
    done
    [ "$failed" -eq 0 ] || die "$what: $failed EVALSHA calls failed in Redis"
}

# ours: bench_redis ($4, default BIN) against the URL $2 (its servers: SERVER_PORTS,
# SERVER_PIDS) with $3 limiters; label $1; concurrency $c.
ours_run() {
    local label=$1 url=$2 limiters=$3 bin=${4:-$BIN} ports=("${SERVER_PORTS[@]}") p evalsha=0 upc_sum=0
    local extra=()
    # Only when needed: a binary built at an older commit may not know these flags.
    if [ "$limiters" != 1 ]; then extra+=(--limiters "$limiters"); fi
    if [ "$COST" != 1 ]; then extra+=(--cost "$COST"); fi
    run=$((run + 1))
    for p in "${ports[@]}"; do
        redis-cli -p "$p" FLUSHALL >/dev/null
        redis-cli -p "$p" CONFIG RESETSTAT >/dev/null
    done
    r0=$(cpu_seconds "${SERVER_PIDS[@]}")
    t0=$(now)
    timed_client "$TMP/ours.out" "${client_pin[@]}" "$bin" --redis "$url" \
        --concurrency "$c" --checks "$CHECKS" --warmup "$WARMUP" --users "$USERS" \
        --window 1s --time-source "$TIME_SOURCE" --timeout "$TIMEOUT" --workers "$WORKERS" \
        "${extra[@]}" ||
        die "$label, concurrency $c: the client failed"
    t1=$(now)
    r1=$(cpu_seconds "${SERVER_PIDS[@]}")
    no_failures "$label, concurrency $c" "${ports[@]}"
    line=$(grep '^result ' "$TMP/ours.out") || die "$label: no result line"
    rps=$(sed -n 's/.* checks_per_sec=\([^ ]*\).*/\1/p' <<<"$line")
    p50=$(sed -n 's/.* p50_us=\([^ ]*\).*/\1/p' <<<"$line")
    p99=$(sed -n 's/.* p99_us=\([^ ]*\).*/\1/p' <<<"$line")
    total=$(sed -n 's/.* total_checks=\([^ ]*\).*/\1/p' <<<"$line")
    # On a cluster a check is one EVALSHA per tier, on its key's master; usec_per_call is
    # then the calls' mean (per script run, not per check).
    for p in "${ports[@]}"; do
        calls=$(cmdstat_on "$p" evalsha calls)
        evalsha=$((evalsha + calls))
        upc_sum=$(awk -v a="$upc_sum" -v n="$calls" -v u="$(cmdstat_on "$p" evalsha usec_per_call)" \
            'BEGIN { print a + n * u }')
    done
    upc=$(div "$upc_sum" "$evalsha")
    per_check=$(div "$evalsha" "$total" %.3f)
    client_us=$(awk -v a="$CLIENT_CPU" -v n="$total" 'BEGIN { printf "%.2f", a / n * 1e6 }')
    redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$total" 'BEGIN { printf "%.2f", (b - a) / n * 1e6 }')
    redis_cpu=$(awk -v a="$r0" -v b="$r1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) / (e - s) }')
    echo "$run,$label,$c,$rep,$CHECKS,$rps,$p50,$p99,$per_check,$client_us,$redis_us,$redis_cpu,$upc" >>"$CSV"
    log "run $run $label c=$c: $rps checks/s, p99 $p99 µs; $evalsha EVALSHA / $total checks =" \
        "$per_check; CPU µs per check: client $client_us, redis $redis_us; usec_per_call $upc"
}

# redis-benchmark on the script $2 (sha) of form $3; label $1; concurrency $c.
rb_run() {
    local label=$1 sha=$2 form=$3
    run=$((run + 1))
    cli FLUSHALL >/dev/null
    if [ "$WARMUP" -gt 0 ]; then
        redis_benchmark "$sha" "$c" "$WARMUP" "$form" >/dev/null 2>"$TMP/rb.err" ||
            die "redis-benchmark warm-up failed: $(cat "$TMP/rb.err")"
    fi
    cli CONFIG RESETSTAT >/dev/null
    r0=$(cpu_seconds "$REDIS_PID")
    t0=$(now)
    timed_client "$TMP/rb.out" redis_benchmark "$sha" "$c" "$CHECKS" "$form" ||
        die "redis-benchmark ($label), concurrency $c failed"
    t1=$(now)
    r1=$(cpu_seconds "$REDIS_PID")
    no_failures "redis-benchmark ($label), concurrency $c" "$PORT"
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    read -r rps p50 p99 < <(awk -F'","' 'NR == 2 {
        printf "%s %.0f %.0f\n", $2, $5 * 1000, $7 * 1000 }' "$TMP/rb.out")
    [ -n "${rps:-}" ] || die "redis-benchmark: no csv line: $(cat "$TMP/rb.out" "$TMP/rb.out.err")"
    evalsha=$(cmdstat evalsha calls)
    [ "$evalsha" -eq "$CHECKS" ] || die "redis-benchmark: $evalsha EVALSHA calls, not $CHECKS"
    upc=$(cmdstat evalsha usec_per_call)
    client_us=$(awk -v a="$CLIENT_CPU" -v n="$CHECKS" 'BEGIN { printf "%.2f", a / n * 1e6 }')
    redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$CHECKS" 'BEGIN { printf "%.2f", (b - a) / n * 1e6 }')
    redis_cpu=$(awk -v a="$r0" -v b="$r1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) / (e - s) }')
    echo "$run,$label,$c,$rep,$CHECKS,$rps,$p50,$p99,1.000,$client_us,$redis_us,$redis_cpu,$upc" >>"$CSV"
    log "run $run $label c=$c: $rps EVALSHA/s, p99 $p99 µs; CPU µs per check:" \
        "client $client_us, redis $redis_us; usec_per_call $upc"
}

run=0
for rep in $(seq "$REPS"); do
    for c in $CONCURRENCY; do
        SERVER_PORTS=("$PORT")
        SERVER_PIDS=("$REDIS_PID")
        for l in $LIMITERS; do
            label=ours
            [ "$l" = 1 ] || label=ours-x$l
            ours_run "$label" "redis://127.0.0.1:$PORT" "$l"
        done
        if [ -n "$BASE_BIN" ]; then
            for l in $LIMITERS; do
                label=ours-base
                [ "$l" = 1 ] || label=ours-base-x$l
                ours_run "$label" "redis://127.0.0.1:$PORT" "$l" "$BASE_BIN"
            done
        fi
        if [ "$CLUSTER" = 1 ]; then
            SERVER_PORTS=("${CLUSTER_PORTS[@]}")
            SERVER_PIDS=("${CLUSTER_PIDS[@]}")
            # Per master: CPU during the run, to see which one is the ceiling.
            n0=()
            for pid in "${CLUSTER_PIDS[@]}"; do n0+=("$(cpu_seconds "$pid")"); done
            s0=$(now)
            ours_run ours-cluster "$CLUSTER_URL" 1
            s1=$(now)
            shares=()
            for i in "${!CLUSTER_PIDS[@]}"; do
                shares+=("$(awk -v a="${n0[$i]}" -v b="$(cpu_seconds "${CLUSTER_PIDS[$i]}")" \
                    -v s="$s0" -v e="$s1" 'BEGIN { printf "%.2f", (b - a) / (e - s) }')")
            done
            log "cluster c=$c: CPU share per master ${shares[*]}; rate_limit:global on master" \
                "$(owner_of rate_limit:global), rate_limit:endpoint:/bench on master" \
                "$(owner_of rate_limit:endpoint:/bench)"
            echo "$c,$rep,${shares[*]},$(owner_of rate_limit:global),$(owner_of rate_limit:endpoint:/bench)" \
                >>"$TMP/cluster_shares.csv"
        fi
        rb_run rb-lean "$LEAN_SHA" plain
        rb_run rb-script "$SHA" "$SCRIPT_FORM"
        if [ -n "$BASE_SHA" ]; then rb_run rb-base "$BASE_SHA" "$BASE_FORM"; fi
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
# Median over the reps of the per-rep ratio of column $3 of client $1 to client $2.
ratio() {
    awk -F, -v a="$1" -v b="$2" -v c="$4" -v n="$3" '
        NR > 1 && $3 == c && $2 == a { x[$4] = $n }
        NR > 1 && $3 == c && $2 == b { y[$4] = $n }
        END { for (r in x) if (y[r] > 0) print x[r] / y[r] }' "$CSV" | median |
        awk '{ if ($1 == "nan") print "n/a"; else printf "%.2f", $1 }'
}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
redis_version=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
{
    echo "# Redis: our limiter vs redis-benchmark on the lean script and on ours"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit, $(nproc) CPUs ($cpu_model), redis-server $redis_version."
    echo "\`benches/redis.sh\`: src/store/redis/script.lua (sha $SHA), benches/lean.lua (sha"
    echo "$LEAN_SHA), 3 tiers, 1 s window, limits never reached, $USERS users, cost $COST (ours);"
    echo "$WARMUP warm-up then $CHECKS timed checks per run, $REPS runs per cell interleaved,"
    echo "medians; our time source: $TIME_SOURCE. Pinning: $pinning."
    echo
    echo "| concurrency | client | checks/s | p99 µs | Redis CPU µs per check | usec_per_call (EVALSHA) | client CPU µs per check | EVALSHA per check | Redis CPU share |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
        for k in $clients; do
            printf '| %s | %s | %.0f | %.0f | %.2f | %.2f | %.2f | %s | %.2f |\n' "$c" "$k" \
                "$(col "$k" "$c" 6 | median)" "$(col "$k" "$c" 8 | median)" \
                "$(col "$k" "$c" 11 | median)" "$(col "$k" "$c" 13 | median)" \
                "$(col "$k" "$c" 10 | median)" "$(col "$k" "$c" 9 | median)" \
                "$(col "$k" "$c" 12 | median)"
        done
    done
    echo
    echo "Ratios (median over the rounds of each round's ratio):"
    echo
    echo "| concurrency | ours / rb-lean, checks/s | rb-script / rb-lean, EVALSHA/s | rb-script / rb-lean, usec_per_call | ours / rb-lean, Redis CPU per check |"
    echo "|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
        echo "| $c | $(ratio ours rb-lean 6 "$c") | $(ratio rb-script rb-lean 6 "$c") |" \
            "$(ratio rb-script rb-lean 13 "$c") | $(ratio ours rb-lean 11 "$c") |"
    done
    if [ -n "$BASE_SHA" ]; then
        echo
        echo "rb-base: $BASE_SCRIPT (sha $BASE_SHA)."
        echo
        echo "| concurrency | rb-script / rb-base, EVALSHA/s | rb-script / rb-base, usec_per_call |"
        echo "|---:|---:|---:|"
        for c in $CONCURRENCY; do
            echo "| $c | $(ratio rb-script rb-base 6 "$c") | $(ratio rb-script rb-base 13 "$c") |"
        done
    fi
    for k in $clients; do
        case $k in
        ours-base-x*)
            echo
            echo "${k/base-/} / $k, checks/s: $(for c in $CONCURRENCY; do printf '%s at %s; ' "$(ratio "${k/base-/}" "$k" 6 "$c")" "$c"; done)"
            ;;
        ours-x* | ours-cluster)
            echo
            echo "$k / ours, checks/s: $(for c in $CONCURRENCY; do printf '%s at %s; ' "$(ratio "$k" ours 6 "$c")" "$c"; done)"
            ;;
        ours-base)
            echo
            echo "ours / ours-base ($BASE_BIN), checks/s: $(for c in $CONCURRENCY; do printf '%s at %s; ' "$(ratio ours "$k" 6 "$c")" "$c"; done)"
            echo "ours / ours-base, Redis CPU per check: $(for c in $CONCURRENCY; do printf '%s at %s; ' "$(ratio ours "$k" 11 "$c")" "$c"; done)"
            ;;
        esac
    done
    if [ -f "$TMP/cluster_shares.csv" ]; then
        echo
        echo "Cluster, CPU share of each master per run (concurrency, round, shares, master of"
        echo "rate_limit:global, master of rate_limit:endpoint:/bench):"
        echo
        sed 's/^/    /' "$TMP/cluster_shares.csv"
    fi
    echo
    echo "ours: RateLimiter (one fred connection per limiter; the commands of concurrent checks"
    echo "are pipelined on it) driven by N tokio tasks on $WORKERS worker thread(s). rb-*:"
    echo "redis-benchmark, N connections, one command in flight on each (-P 1). EVALSHA per"
    echo "check: INFO commandstats over the run, warm-up included. usec_per_call: Redis's time"
    echo "inside EVALSHA per call (no network). CPU per check: user + system CPU time of"
    echo "redis-server (all masters for the cluster), and of the client process, divided by the"
    echo "checks. Raw runs: ${RESULTS#"$ROOT"/}/redis.csv (redis_cpu: redis-server's CPU use in cores;"
    echo "near 1 = Redis was the bottleneck)."
} >"$TMP/redis.md"
cp "$CSV" "$RESULTS/redis.csv"
cp "$TMP/redis.md" "$RESULTS/redis.md"
cat "$RESULTS/redis.md"
