# Sourced by the bench scripts that start a redis-server of their own (never the machine's on
# 6379): free_port prints a loopback port nothing answers on, from 20 random tries, or fails.
free_port() {
    local p
    for _ in $(seq 20); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    echo "no free port" >&2
    return 1
}
