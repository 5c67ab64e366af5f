#!/usr/bin/env bash
# Instructions Redis executes per EVALSHA of a script, counted by valgrind's callgrind: a
# measure of a script's cost that a busy machine cannot blur (timings can).
#
#   benches/redis_callgrind.sh                          # benches/lean.lua and our script
#   benches/redis_callgrind.sh old.lua src/store/redis/script.lua
#   COST=5 benches/redis_callgrind.sh                   # requests of cost 5
#   TOP=25 benches/redis_callgrind.sh                   # and where the instructions go
#   BLOCKS=1 benches/redis_callgrind.sh src/store/redis/script.lua  # with the two block keys
#                                                       # a check sends (no block set)
#   USERS=360 benches/redis_callgrind.sh   # fewer users: about five entries a user key (default 1,000)
#   BATCH=16 benches/redis_callgrind.sh src/store/redis/script.lua  # 16 checks per EVALSHA, as
#                                   # our limiter sends them under load (src/store/redis/batch.rs):
#                                   # the checks after the first short, as it sends them (all
#                                   # differ only in their time and user), or SHORT=0: all whole
#   TIME=app BATCH=16 benches/redis_callgrind.sh    # each check its own time (the app's clock,
#                                   # TimeSource::App), where by default every check sends an
#                                   # empty one (Redis TIME, one time for the whole batch)
#
# For each script: a redis-server of its own under callgrind on a free loopback port, the
# script loaded, CALLS/2 EVALSHA calls to fill the window (untimed), the counters zeroed, CALLS
# calls by redis-benchmark (-c 4, 1,000 users, the arguments of benches/redis.sh: three tiers,
# Redis TIME, 1 s window, limits 2^40), the counters dumped. Prints, per script, the
# instructions inside evalShaCommand per call (the script and the commands it runs) and in the
# whole server per call (with reading and answering the command). Under callgrind Redis runs
# about 50 times slower, so its 1 s window holds fewer entries than in benches/redis.sh; the
# keys' sizes only change the O(log n) parts. Needs valgrind (Debian: apt-get install
# valgrind). TOP=n also prints the n functions with the most instructions of their own.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=benches/free_port.sh
source "$ROOT/benches/free_port.sh"
CALLS=${CALLS:-2000}
COST=${COST:-1}
TOP=${TOP:-0}
BLOCKS=${BLOCKS:-0}
BATCH=${BATCH:-1}
USERS=${USERS:-1000}
SHORT=${SHORT:-1}
TIME=${TIME:-redis}
if [ "$#" -eq 0 ]; then set -- benches/lean.lua src/store/redis/script.lua; fi
for tool in valgrind callgrind_annotate callgrind_control redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "redis_callgrind.sh: $tool is not installed" >&2
        exit 1
    }
done

TMP=$(mktemp -d)
VG_PID=
cleanup() {
    if [ -n "$VG_PID" ] && kill -0 "$VG_PID" 2>/dev/null; then kill -TERM "$VG_PID" 2>/dev/null || true; fi
    if [ -n "${KEEP:-}" ]; then cp -r "$TMP" "$KEEP"; fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# Own-instruction totals per function of a callgrind file, the top $2, per call ($3 calls).
top_functions() {
    python3 - "$1" "$2" "$3" <<'PY'
import collections, re, sys
names, own, fn, skip = {}, collections.Counter(), None, False
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        if m.group(1) == "fn":
            fn = names.get(m.group(2), m.group(2))
        continue
    if line.startswith("calls="):
        skip = True
        continue
    if line[:1].isdigit() or line[:1] in "+-*":
        parts = line.split()
        if skip:
            skip = False
        elif len(parts) >= 2:
            own[fn] += int(parts[1])
total = sum(own.values())
for f, c in own.most_common(int(sys.argv[2])):
    print(f"  {c // int(sys.argv[3]):8d} {100 * c / total:5.1f}%  {f}")
PY
}

# TIME=app: N EVALSHA calls of these arguments, one after the other on one connection, each
# check's empty time replaced by the app's (the clock in µs, 5 to 30 µs after the check before,
# as checks gathered over a round trip are stamped) and each __rand_int__ by a user below USERS.
# FORMAT is `batch` (ours: checks one after the other in the arguments) or `plain` (one check:
# its time is ARGV[1], as benches/lean.lua takes it).
app_time() {
    python3 - "$USERS" "$@" <<'PY'
import random, socket, sys, time
users, batched = int(sys.argv[1]), sys.argv[2] == "batch"
port, calls, sha, args = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6:]
nkeys = int(args[0])
conn = socket.create_connection(("127.0.0.1", port))
reader = conn.makefile("rb")
def skip():
    line = reader.readline()
    kind, rest = line[:1], line[1:].strip()
    if kind == b"-":
        sys.exit("EVALSHA failed: " + rest.decode())
    if kind == b"$" and int(rest) >= 0:
        reader.read(int(rest) + 2)
    elif kind == b"*":
        for _ in range(max(int(rest), 0)):
            skip()
random.seed(7)
clock = int(time.time() * 1e6)
def stamp():
    global clock
    clock = max(clock + random.randint(5, 30), int(time.time() * 1e6))
    return str(clock)
for _ in range(calls):
    keys, argv = list(args[1:1 + nkeys]), list(args[1 + nkeys:])
    a = k = 0
    if not batched:
        user = str(random.randrange(users))
        keys = [key.replace("__rand_int__", user) for key in keys]
        if argv[0] == "":
            argv[0] = stamp()
        a = len(argv)
    while a < len(argv):
        short = argv[a + 1] == ""
        if not short:
            n, b = int(argv[a + 3]), int(argv[a + 4])
        mine = 1 + (b > 0) if short else n + b
        user = str(random.randrange(users))
        for i in range(k, k + mine):
            keys[i] = keys[i].replace("__rand_int__", user)
        if argv[a] == "":
            argv[a] = stamp()
        a, k = a + (2 if short else 5 + n), k + mine
    parts = [b"EVALSHA", sha.encode(), str(nkeys).encode()] + [x.encode() for x in keys + argv]
    conn.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in parts))
    skip()
PY
}

for script in "$@"; do
    port=$(free_port)
    dir=$TMP/$port
    mkdir -p "$dir"
    valgrind --tool=callgrind --callgrind-out-file="$dir/out" redis-server --port "$port" \
        --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" \
        >"$dir/valgrind.log" 2>&1 &
    VG_PID=$!
    for _ in $(seq 300); do
        [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    sha=$(redis-cli -p "$port" -x SCRIPT LOAD <"$script")
    one=(rate_limit:user:__rand_int__ rate_limit:endpoint:/bench rate_limit:global)
    blocks=0
    if [ "${BLOCKS:-0}" = 1 ]; then
        one+=("{rate_limit:user:__rand_int__}#block" "{rate_limit:endpoint:/bench}#block")
        blocks=2
    fi
    limits=(1099511627776 1099511627776 1099511627776)
    per_call=1
    format=plain
    if grep -q 'decide a batch of requests' "$script"; then
        format=batch
        # Ours takes a batch: BATCH checks, each with its keys and its arguments.
        per_call=$BATCH
        keys=()
        argv=()
        for j in $(seq "$BATCH"); do
            if [ "$j" -gt 1 ] && [ "$SHORT" = 1 ] && grep -q 'be sent short' "$script"; then
                # As the limiter sends a check that repeats the one before but for its time
                # and user: its time and "", its user's key and block key.
                keys+=("${one[0]}")
                [ "$blocks" = 0 ] || keys+=("${one[3]}")
                argv+=("" "")
            else
                keys+=("${one[@]}")
                argv+=("" 1000000 "$COST" 3 "$blocks" "${limits[@]}")
            fi
        done
        args=("${#keys[@]}" "${keys[@]}" "${argv[@]}")
    else
        args=("${#one[@]}" "${one[@]}" "" 1000000 "$COST" "${limits[@]}")
    fi
    if [ "$TIME" = app ]; then
        app_time "$format" "$port" $((CALLS / 2)) "$sha" "${args[@]}"
        callgrind_control -z "$VG_PID" >/dev/null 2>&1
        app_time "$format" "$port" "$CALLS" "$sha" "${args[@]}"
    else
        redis-benchmark -p "$port" -c 4 -n $((CALLS / 2)) -P 1 -r "$USERS" EVALSHA "$sha" "${args[@]}" >/dev/null
        callgrind_control -z "$VG_PID" >/dev/null 2>&1
        redis-benchmark -p "$port" -c 4 -n "$CALLS" -P 1 -r "$USERS" EVALSHA "$sha" "${args[@]}" >/dev/null
    fi
    callgrind_control -d "$VG_PID" >/dev/null 2>&1
    failed=$(redis-cli -p "$port" INFO errorstats | grep -c '^errorstat_' || true)
    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait "$VG_PID" 2>/dev/null || true
    VG_PID=
    [ "$failed" -eq 0 ] || { echo "$script: EVALSHA errors" >&2; exit 1; }
    dump=$dir/out.1
    inside=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
        awk '/:evalShaCommand /{ gsub(",", "", $1); print $1 }')
    whole=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/{ gsub(",", "", $1); print $1 }')
    echo "$script cost=$COST batch=$per_call: $((inside / CALLS / per_call)) instructions per" \
        "check inside the script, $((whole / CALLS / per_call)) in the whole server"
    if [ "$TOP" -gt 0 ]; then top_functions "$dump" "$TOP" "$CALLS"; fi
done
