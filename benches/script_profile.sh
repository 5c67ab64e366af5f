#!/usr/bin/env bash
# Which lines of the Redis script a check spends its Lua bytecodes on, counted (not timed):
# the script runs in a standalone Lua 5.1 against a redis-server of its own on a free
# loopback port (benches/script_profile.lua says how). Callgrind says how many instructions
# Redis spends a check (benches/redis_callgrind.sh); about a fifth of them are the Lua VM's
# own, and this says which lines they go to.
#
#   benches/script_profile.sh                             # src/store/redis/script.lua
#   BATCH=5 TOP=20 benches/script_profile.sh /tmp/old.lua # another script, batches of 5
#   TIME=app benches/script_profile.sh                    # each check its own time
#
# Settings: BATCH (16, checks per EVALSHA), USERS (360), WARM (100 batches untimed),
# PROFILED (100 batches counted), TOP (40 lines), TIME (redis: Redis TIME, the library's
# default; app: the app's clock, each check its own microsecond). Needs lua5.1, lua-socket and redis-server
# (Debian: apt-get install lua5.1 lua-socket redis-server).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT=${1:-$ROOT/src/store/redis/script.lua}
for tool in lua5.1 redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "script_profile.sh: $tool is not installed" >&2
        exit 1
    }
done
lua5.1 -e 'require("socket")' 2>/dev/null || {
    echo "script_profile.sh: lua-socket is not installed" >&2
    exit 1
}
# shellcheck source=benches/free_port.sh
source "$ROOT/benches/free_port.sh"
port=$(free_port)
TMP=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    --logfile "$TMP/redis.log" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.05
done
lua5.1 "$ROOT/benches/script_profile.lua" "$port" "$SCRIPT" "${BATCH:-16}" "${USERS:-360}" \
    "${WARM:-100}" "${PROFILED:-100}" "${TOP:-40}" "${TIME:-redis}"
