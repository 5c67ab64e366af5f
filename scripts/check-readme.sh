#!/usr/bin/env bash
# Checks that README.md's Rust snippets work as shown: each ```rust block, taken verbatim from
# README.md, is the `main.rs` of its own binary in a scratch crate whose dependencies are the
# README's own `[dependencies]` block (its `tiered-ratelimit` line pointed at this checkout).
#
# Rules:
# - Every ```rust block must compile as written: no rustdoc hidden lines (`# ...`), since
#   GitHub and crates.io show them verbatim and a pasted snippet must build.
# - A block fenced ```rust,no_run (it serves, or needs Redis) is only built; every other block
#   is also run, and must exit 0 within 60 s. It runs in a folder holding `ratelimit.toml`: the
#   README's ```toml block whose first line is `# ratelimit.toml`.
# - The dependency lines are the README's ```toml block that starts with `[dependencies]`,
#   verbatim but for the `tiered-ratelimit = ...` line, which names this checkout's path.
#
# Offline (`cargo build --offline`): the registry cache the crate's own build filled is enough.
# Everything lives under target/readme-check (its own CARGO_TARGET_DIR, kept between runs, so a
# second run builds only what changed). Exits non-zero, naming the README line, on any failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
readme="$root/README.md"
work="$root/target/readme-check"
crate="$work/crate"
export CARGO_TARGET_DIR="$work/target"

rm -rf "$crate" "$work/run"
mkdir -p "$crate/src/bin" "$work/run"

# Split the README: rust blocks into src/bin/readme_line_N.rs (N: the line of the opening
# fence), the [dependencies] block into deps.toml, the `# ratelimit.toml` block into run/.
awk -v bin="$crate/src/bin" -v deps="$crate/deps.toml" -v cfg="$work/run/ratelimit.toml" \
    -v list="$crate/snippets.txt" '
  function fail(msg) { printf "README.md:%d: %s\n", NR, msg > "/dev/stderr"; bad = 1 }
  !inside && /^```rust/ {
    inside = "rust"; start = NR; file = bin "/readme_line_" NR ".rs"
    printf "" > file
    print NR, ($0 ~ /no_run/ ? "build" : "run") > list
    next
  }
  !inside && /^```toml/ { inside = "toml"; start = NR; first = 1; out = ""; next }
  !inside && /^```/ { inside = "other"; next }
  inside && /^```[[:space:]]*$/ {
    if (inside == "rust") close(file)
    if (out != "") close(out)
    inside = ""; out = ""; next
  }
  inside == "rust" {
    if ($0 ~ /^[[:space:]]*#([[:space:]]|$)/) fail("rustdoc hidden line in a snippet: write it whole")
    print > file
    next
  }
  inside == "toml" && first {
    first = 0
    if ($0 ~ /^\[dependencies\]/) { out = deps; ndeps++ }
    else if ($0 ~ /^# ratelimit\.toml/) { out = cfg; ncfg++ }
  }
  inside == "toml" && out != "" { print > out }
  END {
    if (inside) { printf "README.md: a code block opened at line %d is never closed\n", start > "/dev/stderr"; bad = 1 }
    if (ndeps != 1) { print "README.md: expected one ```toml block starting with [dependencies]" > "/dev/stderr"; bad = 1 }
    if (ncfg > 1) { print "README.md: more than one `# ratelimit.toml` block" > "/dev/stderr"; bad = 1 }
    exit bad
  }
' "$readme"

if ! grep -q '^tiered-ratelimit *=' "$crate/deps.toml"; then
  echo "README.md: the [dependencies] block does not name tiered-ratelimit" >&2
  exit 1
fi

{
  cat <<'EOF'
[package]
name = "readme-snippets"
version = "0.0.0"
edition = "2021"
publish = false

# Not a member of the repository's workspace.
[workspace]

EOF
  sed "s|^tiered-ratelimit *=.*|tiered-ratelimit = { path = \"$root\" }|" "$crate/deps.toml"
} > "$crate/Cargo.toml"
# Start from the crate's own lock file, so the snippets build against the versions it tests.
[ -f "$root/Cargo.lock" ] && cp "$root/Cargo.lock" "$crate/Cargo.lock"

count=$(wc -l < "$crate/snippets.txt")
echo "README.md: building $count snippets as they are shown"
if ! (cd "$crate" && cargo build --offline --bins --quiet); then
  echo "README.md: a snippet does not compile (src/bin/readme_line_N.rs is the block opened at README.md line N)" >&2
  exit 1
fi

ran=0
while read -r line mode; do
  [ "$mode" = run ] || continue
  if ! (cd "$work/run" && timeout 60 "$CARGO_TARGET_DIR/debug/readme_line_$line" >/dev/null); then
    echo "README.md:$line: the snippet compiled but did not run to success" >&2
    exit 1
  fi
  ran=$((ran + 1))
done < "$crate/snippets.txt"
echo "README.md: $count snippets build, $ran run to success"
