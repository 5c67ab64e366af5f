#!/usr/bin/env python3
"""Turns the measured data into the tables and the plot of docs/BENCHMARKS.md.

Reads criterion's estimates (CRITERION_HOME, else the cargo target directory's
criterion/*/*/*/new/estimates.json, written by
`cargo bench -p tiered-ratelimit-benches --bench check`) and benches/results/http.csv and
redis.csv (written by benches/http.sh and benches/redis.sh; a file named that is missing is
an error). Prints markdown tables and writes docs/benchmarks.png (needs matplotlib: `pip
install matplotlib`; without it the script fails rather than draw nothing).

HTTP_CSV and REDIS_CSV name other files in benches/results to draw instead (a run kept
under its own name, e.g. HTTP_CSV=http-morning.csv). CHECK_MD names a file in benches/results
holding the closing table benches/check.sh printed, once (e.g. CHECK_MD=check-amd-29.md): the
three target cases' table and panel then take each side's median over its rounds, and the
median of the rounds' own ratios, instead of criterion's last round. The live-entries table
always comes from criterion's estimates.
"""
import os
import csv
import json
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results"


def criterion_dir():
    """Where criterion wrote: CRITERION_HOME if set, else cargo's target directory's
    `criterion` (scripts/target-dir.sh: CARGO_TARGET_DIR or a config's target-dir included),
    as benches/criterion.sh reads it."""
    home = os.environ.get("CRITERION_HOME")
    if home:
        # Relative to where the script runs, as benches/criterion.sh reads it.
        return pathlib.Path(home).resolve()
    target = subprocess.run(
        [str(ROOT / "scripts" / "target-dir.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    return pathlib.Path(target) / "criterion"


CRITERION = criterion_dir()


def criterion_ns(group, function, param):
    path = CRITERION / group / function / str(param) / "new" / "estimates.json"
    if not path.exists():
        return None
    est = json.loads(path.read_text())
    return est["median"]["point_estimate"], est["median"]["confidence_interval"]


CHECK_HEADER = "| case | ours (ns/check), median of rounds |"
CHECK_CASES = ("hot_keys_1_thread", "two_threads_same_keys", "two_threads_100k_users")


def check_md_medians(name):
    """benches/check.sh's closing table in benches/results/NAME, which must hold it once with
    the three target cases: {case: (ours, governor, ratio)}, each side's median over the rounds
    and the median of the rounds' own ratios. Exits with a message otherwise."""
    path = RESULTS / name
    if not path.exists():
        sys.exit(f"CHECK_MD: {path} does not exist")
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(CHECK_HEADER)]
    if len(starts) != 1:
        sys.exit(
            f"CHECK_MD: {path} holds {len(starts)} tables of benches/check.sh, not one "
            f"(a table starts with {CHECK_HEADER!r})"
        )
    medians = {}
    for line in lines[starts[0] + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        try:
            medians[cells[0]] = (float(cells[1]), float(cells[2]), float(cells[3].rstrip("x")))
        except (IndexError, ValueError):
            sys.exit(f"CHECK_MD: {path}: a row of benches/check.sh's table not understood: {line}")
    missing = [case for case in CHECK_CASES if case not in medians]
    if missing:
        sys.exit(f"CHECK_MD: {path}: benches/check.sh's table lacks {', '.join(missing)}")
    return medians


def memory_table():
    rows = []
    check_md = os.environ.get("CHECK_MD")
    medians = check_md_medians(check_md) if check_md else None
    if check_md:
        print(f"(memory: the medians of the rounds in benches/results/{check_md})", file=sys.stderr)
    cases = [
        ("hot_keys_1_thread", "memory", "one thread, one set of hot keys", "governor_keyed_x3"),
        ("two_threads_same_keys", "memory", "two threads, same keys", "governor_keyed_x3"),
        ("two_threads_100k_users", "memory", "two threads, 100,000 users", "governor_keyed_x3"),
    ]
    if medians is not None:
        print("| case | tiered-ratelimit (ns/check), median of rounds | governor keyed ×3 (ns/check), median of rounds | ratio, median of the rounds' ratios |")
        print("|---|---:|---:|---:|")
        for group, _, label, _ in cases:
            ours, base, ratio = medians[group]
            rows.append((label, ours, base))
            print(f"| {label} | {ours:.1f} | {base:.1f} | {ratio:.2f}x |")
    else:
        print("| case | tiered-ratelimit (ns/check) | governor keyed ×3 (ns/check) | ratio |")
        print("|---|---:|---:|---:|")
        for group, param, label, baseline in cases:
            ours = criterion_ns(group, "tiered_ratelimit", param)
            base = criterion_ns(group, baseline, param)
            if ours and base:
                rows.append((label, ours[0], base[0]))
                print(f"| {label} | {ours[0]:.1f} | {base[0]:.1f} | {ours[0] / base[0]:.2f}x |")
    ten = criterion_ns("live_entries_per_key", "tiered_ratelimit", 10)
    million = criterion_ns("live_entries_per_key", "tiered_ratelimit", 1000000)
    if ten and million:
        print()
        print("| live entries in the key | ns/check | ratio to 10 |")
        print("|---:|---:|---:|")
        print(f"| 10 | {ten[0]:.1f} | 1.00x |")
        print(f"| 1,000,000 | {million[0]:.1f} | {million[0] / ten[0]:.2f}x |")
    return rows


def read_csv(name):
    path = RESULTS / name
    if not path.exists():
        sys.exit(f"{path} does not exist: name a file of benches/results (HTTP_CSV, REDIS_CSV)")
    with path.open() as f:
        return list(csv.DictReader(f))


def plot(memory_rows, http_rows, redis_rows):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing, so no plot was drawn: pip install matplotlib")
    panels = [p for p in (memory_rows, http_rows, redis_rows) if p]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2))
    if len(panels) == 1:
        axes = [axes]
    ax_iter = iter(axes)
    if memory_rows:
        ax = next(ax_iter)
        labels = [r[0] for r in memory_rows]
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], [r[1] for r in memory_rows], 0.4, label="tiered-ratelimit")
        ax.bar([i + 0.2 for i in x], [r[2] for r in memory_rows], 0.4, label="governor keyed ×3")
        ax.set_xticks(list(x), [l.replace(", ", ",\n") for l in labels], fontsize=8)
        ax.set_ylabel("ns per check (lower is better)")
        ax.set_title("In-memory check, three tiers")
        ax.legend(fontsize=8)
    if http_rows:
        ax = next(ax_iter)
        colors = {
            "bare": "grey",
            "headers": "silver",
            "ours": "tab:blue",
            "inner": "tab:cyan",
            "inner_handler": "tab:purple",
            "governor": "tab:orange",
            "governor_headers": "moccasin",
        }
        modes = [m for m in colors if any(r["mode"] == m for r in http_rows)]
        medians = []
        for m in modes:
            vals = [float(r["requests_per_sec"]) for r in http_rows if r["mode"] == m]
            medians.append(statistics.median(vals))
        ax.bar(modes, medians, color=[colors[m] for m in modes])
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.set_ylabel("requests/s (higher is better)")
        ax.set_title("axum hello-world under wrk")
    if redis_rows:
        ax = next(ax_iter)
        levels = sorted({int(r["concurrency"]) for r in redis_rows})
        # benches/redis.sh's clients; "redis-benchmark" in csv files written before the lean
        # baseline was added.
        for who, color in (
            ("ours", "tab:blue"),
            ("rb-lean", "tab:red"),
            ("rb-script", "tab:green"),
            ("redis-benchmark", "tab:green"),
        ):
            if not any(r["client"] == who for r in redis_rows):
                continue
            ys = []
            for c in levels:
                vals = [
                    float(r["checks_per_sec"])
                    for r in redis_rows
                    if int(r["concurrency"]) == c and r["client"] == who
                ]
                ys.append(statistics.median(vals) if vals else 0)
            ax.plot(levels, ys, marker="o", label=who, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent tasks / clients")
        ax.set_ylabel("checks/s (higher is better)")
        ax.set_title("Redis: ours, the lean script and ours by redis-benchmark")
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = ROOT / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=110)
    print(f"\n(plot written to {out.relative_to(ROOT)})", file=sys.stderr)


def main():
    memory_rows = memory_table()
    http = os.environ.get("HTTP_CSV", "http.csv")
    redis = os.environ.get("REDIS_CSV", "redis.csv")
    print(f"(drawing benches/results/{http} and {redis})", file=sys.stderr)
    plot(memory_rows, read_csv(http), read_csv(redis))


if __name__ == "__main__":
    main()
