#!/usr/bin/env bash
# The crate's top-level module graph, from the `crate::` paths each file names: one edge
# "from to" per line, then `tsort` orders the modules, which fails (and names the loop) if
# there is an import cycle. Usage: scripts/module-graph.sh [--edges]
set -euo pipefail
cd "$(dirname "$0")/../src"
edges=$(
  for f in $(find . -name '*.rs' | sort); do
    from=$(echo "$f" | sed -E 's#^\./##; s#(/mod)?\.rs$##; s#/.*##')
    [ "$from" = lib ] && continue
    { grep -v '^\s*//' "$f" | grep -oE 'crate::[a-z_]+' || true; } | sed 's/crate:://' | sort -u |
      while read -r to; do [ "$to" != "$from" ] && echo "$from $to"; done
  done | sort -u
)
if [ "${1:-}" = "--edges" ]; then echo "$edges"; exit 0; fi
echo "$edges" | tsort >/dev/null 2>/tmp/module-graph.err || true
if [ -s /tmp/module-graph.err ]; then
  cat /tmp/module-graph.err >&2
  echo "import cycle between top-level modules" >&2
  exit 1
fi
# The core knows no HTTP: only the layer (and the client-address rules it uses) and the admin
# routes name the `http` crate, so the limiter, the algorithm, the stores and the decision stay plain data.
http_users=$(grep -rlE '(^|[^_a-z])http(_body)?::' --include='*.rs' . | grep -vE '^\./(layer|client_ip|admin)/' || true)
if [ -n "$http_users" ]; then
  echo "the core must not name HTTP types (only layer/, client_ip/ and admin/ may): $http_users" >&2
  exit 1
fi
echo "no import cycle between top-level modules; from the core outwards:"
echo "$edges" | awk '{print $2, $1}' | tsort | tr '\n' ' '
echo
