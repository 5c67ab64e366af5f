# Shared by benches/http.sh and benches/http_ab.sh (sourced, not run): one bench_http server at
# a time, started on a free loopback port and stopped again, and its CPU time. The sourcing
# script sets TMP (a scratch directory), server_pin (an array: the taskset prefix, or empty) and
# die (prints its arguments and exits), and installs `trap cleanup EXIT`.

SERVER_PID=
ADDR=

# Stops a server left running (an error, Ctrl-C) and removes TMP.
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}

# Starts binary $1 in mode $2 with $3 tokio workers; sets SERVER_PID and ADDR (host:port).
start_server() {
    local bin=$1 mode=$2 workers=$3
    : >"$TMP/server.out"
    "${server_pin[@]}" "$bin" --mode "$mode" --listen 127.0.0.1:0 --workers "$workers" \
        >"$TMP/server.out" 2>"$TMP/server.err" &
    SERVER_PID=$!
    ADDR=
    for _ in $(seq 200); do
        ADDR=$(sed -n 's/^listening on //p' "$TMP/server.out")
        [ -n "$ADDR" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    cat "$TMP/server.err" >&2
    die "the $mode server did not start ($bin)"
}

stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# CPU seconds (user + system) used so far by process $1, all threads.
cpu_seconds() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"
}
