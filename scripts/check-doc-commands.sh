#!/usr/bin/env bash
# Checks that every command README.md and docs/**/*.md tell a reader to run still runs: the
# example or bench still exists under that name with those features, the documented flags are
# still accepted, the script is still there. It does not re-measure anything.
#
# Where commands are found: each line of a ```sh, ```bash, ```shell or ```console block (a
# trailing `\` joins the next line; a leading `$ ` is dropped), and each inline `code span`,
# whose first word (after any `NAME=value` environment assignments) is `cargo`, a path to a
# `scripts/*.sh` or `benches/*.sh` script, or `python3` on a `scripts/`, `benches/` or `docs/` file. Other lines (a `for` loop, `curl`, `valgrind`) are
# prose for people, not commands this can run alone.
#
# The rule for each kind, so that the check is cheap and never a measurement:
# - `cargo run [flags] --example NAME [-- ARGS]`: `cargo build [flags] --example NAME` (in the
#   dev profile: `--release` changes how fast it runs, not whether it runs). If ARGS start with
#   a flag (`--...`), the built example is then run with ARGS followed by `--help`: it must
#   accept every documented flag and exit 0. With no ARGS it is run as documented and must exit
#   0 within 120 s (the dev build measures nothing worth keeping, but a panic shows). Positional
#   ARGS (a Redis URL with a PORT to fill in): build only, since the run needs a server.
# - `cargo build ...`: the same build, in the dev profile.
# - `cargo bench ...`: with `--no-run` (builds the bench; running it is a measurement), any
#   `-- FILTER` dropped.
# - `cargo test ...`: with `--no-run` (CI runs the tests themselves).
# - `scripts/*.sh`, `benches/*.sh`: the script exists, is executable and parses (`bash -n`);
#   benches measure, and CI runs the checks in scripts/ itself.
# - `python3 FILE.py`: the file exists and parses (it draws plots from measured data, or drives
#   load at a running demo to draw one).
# Any other `cargo` subcommand in the docs is an error here: give it a rule first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

files=(README.md)
while IFS= read -r f; do files+=("$f"); done < <(find docs -name '*.md' | sort)

# One candidate command per line, as "FILE:LINE<TAB>command".
extract() {
  awk '
    function emit(cmd,    r) {
      sub(/^[[:space:]]*\$[[:space:]]+/, "", cmd)
      sub(/^[[:space:]]+/, "", cmd)
      sub(/[[:space:]]+#.*$/, "", cmd)
      sub(/[[:space:]]+$/, "", cmd)
      r = cmd
      while (r ~ /^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*[[:space:]]+/) sub(/^[^[:space:]]+[[:space:]]+/, "", r)
      if (r ~ /^cargo[[:space:]]/ || r ~ /^(\.\/)?(scripts|benches)\/[^[:space:]]*\.sh([[:space:]]|$)/ ||
          r ~ /^python3[[:space:]]+(scripts|benches|docs)\/[^[:space:]]*\.py([[:space:]]|$)/)
        printf "%s:%d\t%s\n", FILENAME, at, r
    }
    FNR == 1 { shell = 0; fence = 0; pending = "" }
    /^```/ {
      if (!fence) { fence = 1; shell = ($0 ~ /^```(sh|bash|shell|console)[[:space:]]*$/) }
      else { fence = 0; shell = 0 }
      next
    }
    fence && shell {
      line = $0
      if (pending == "") at = FNR
      if (line ~ /\\$/) { sub(/\\$/, "", line); pending = pending line " "; next }
      emit(pending line); pending = ""
      next
    }
    fence { next }
    {
      rest = $0
      while (match(rest, /`[^`]+`/)) {
        at = FNR
        emit(substr(rest, RSTART + 1, RLENGTH - 2))
        rest = substr(rest, RSTART + RLENGTH)
      }
    }
  ' "$@"
}

failures=0
checked=0
seen=$'\n'
fail() { echo "FAIL $1: $2" >&2; failures=$((failures + 1)); }

check_cargo() {
  local where="$1"; shift
  local sub="$1"; shift
  local flags=() args=() example="" after=0 a
  for a in "$@"; do
    [ "$a" = "&" ] && continue # a trailing `&` runs the command in the background: not an argument
    if [ "$after" = 1 ]; then args+=("$a"); continue; fi
    case "$a" in
      --) after=1 ;;
      --release | --no-run) ;;
      *) flags+=("$a") ;;
    esac
  done
  for ((i = 0; i < ${#flags[@]}; i++)); do
    [ "${flags[$i]}" = --example ] && example="${flags[$((i + 1))]:-}"
  done
  case "$sub" in
    run)
      [ -n "$example" ] || { fail "$where" "cargo run without --example: no rule for it"; return; }
      cargo build --quiet "${flags[@]}" || { fail "$where" "cargo build ${flags[*]} failed"; return; }
      if [ "${#args[@]}" -eq 0 ]; then
        timeout 120 "${CARGO_TARGET_DIR:-target}/debug/examples/$example" >/dev/null ||
          fail "$where" "the example did not run to success"
      elif [[ "${args[0]}" == --* ]]; then
        timeout 60 "${CARGO_TARGET_DIR:-target}/debug/examples/$example" "${args[@]}" --help >/dev/null ||
          fail "$where" "the example refused its documented flags: ${args[*]} --help"
      fi
      ;;
    build) cargo build --quiet "${flags[@]}" || fail "$where" "cargo build ${flags[*]} failed" ;;
    bench) cargo bench --quiet "${flags[@]}" --no-run || fail "$where" "cargo bench ${flags[*]} --no-run failed" ;;
    test) cargo test --quiet "${flags[@]}" --no-run || fail "$where" "cargo test ${flags[*]} --no-run failed" ;;
    *) fail "$where" "cargo $sub: no rule for it in scripts/check-doc-commands.sh" ;;
  esac
}

while IFS=$'\t' read -r where cmd; do
  # Once per distinct command (several docs may give the same one).
  case "$seen" in *$'\n'"$cmd"$'\n'*) continue ;; esac
  seen+="$cmd"$'\n'
  checked=$((checked + 1))
  echo "check $where: $cmd"
  read -r -a words <<< "$cmd"
  if [ "${words[0]}" = cargo ]; then
    check_cargo "$where" "${words[@]:1}"
  elif [ "${words[0]}" = python3 ]; then
    if [ ! -f "${words[1]}" ]; then fail "$where" "${words[1]} does not exist"
    elif ! python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "${words[1]}"; then
      fail "$where" "${words[1]} does not parse"
    fi
  else
    script="${words[0]#./}"
    if [ ! -f "$script" ]; then fail "$where" "$script does not exist"
    elif [ ! -x "$script" ]; then fail "$where" "$script is not executable"
    elif ! bash -n "$script"; then fail "$where" "$script does not parse"
    fi
  fi
done < <(extract "${files[@]}")

if [ "$checked" = 0 ]; then
  echo "no documented command found: the extraction is broken" >&2
  exit 1
fi
echo "documented commands: $checked checked, $failures failed"
[ "$failures" = 0 ]
