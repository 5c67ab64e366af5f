#!/usr/bin/env python3
"""Drives load at a running demo server and draws what its /metrics showed: docs/metrics.png.

It starts nothing itself. Given the demo's URL, it sends requests for --seconds (75 by default)
as several users, some above their limit, and crowds of one-off ids above the endpoint and
global limits; scrapes GET /metrics every second; and draws the series of the panels of
docs/grafana-dashboard.json from those scrapes: checks per second by decision and tier, the
denial ratio, store latency p50/p99 (from the histogram's buckets, as histogram_quantile does),
and store errors, fallbacks and blocks. Rates are taken over 5 s (the dashboard's [1m] is longer
than the run's 10 s waves, and would smooth them away). The first scrape that shows a fallback
is marked on every plot.

Standard library only, but for the drawing: matplotlib (`pip install matplotlib`). With
--csv FILE the raw scrapes are also written out (time, series, labels, value); --from-csv FILE
draws such a file again without driving any load.

With --admin-token (the demo's), an operator blocks mallory through the admin routes at
--block-at seconds and lifts the block at --unblock-at.

The picture in docs/ was made against the demo on a Redis of its own, killed after ~55 s, with
mallory blocked from 20 s to 35 s (docs/OPERATIONS.md, "Seeing it", has the commands):

    python3 docs/metrics_load.py --url http://127.0.0.1:3000 --seconds 75 \
        --admin-token "$TOKEN" --out docs/metrics.png
"""
import argparse
import bisect
import csv
import http.client
import math
import threading
import time
import urllib.parse

# (user id, requests per second, path); the demo in the docs limits a user to 100 and a route to
# 400 requests in 10 s, and all to 700: 10/s, 40/s and 70/s in the long run.
USERS = [
    ("alice", 4, "/api/v1/items"),
    ("bob", 8, "/api/v1/items/1"),
    ("carol", 16, "/api/v1/items"),
    ("mallory", 30, "/api/v1/items/2"),
]
# One-off ids (never over their own limit), per second and route: over the endpoint limit on
# the first route, and with everyone else over the global limit on the second.
CROWDS = [(70, "/api/v1/items/{n}"), (20, "/api/v1/items")]
RATE_WINDOW = 5  # seconds of scrapes a rate is taken over


def connection(url):
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)


def drive(url, stop, per_second, path, user=None):
    """Sends GETs at a steady pace until `stop` is set; a fresh id each time without `user`."""
    conn = connection(url)
    interval = 1.0 / per_second
    next_at = time.monotonic()
    n = 0
    while not stop.is_set():
        n += 1
        headers = {"x-user-id": user or f"crowd-{threading.get_ident()}-{n}"}
        try:
            conn.request("GET", path.format(n=n % 1000), headers=headers)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = connection(url)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def operate(url, token, stop, started, block_at, unblock_at):
    """The operator: blocks mallory through the admin routes at `block_at` seconds, and lifts
    the block at `unblock_at`."""
    for at, path, body in ((block_at, "/admin/block", '{"user":"mallory","seconds":600}'),
                           (unblock_at, "/admin/unblock", '{"user":"mallory"}')):
        while not stop.is_set() and time.monotonic() - started < at:
            time.sleep(0.05)
        if stop.is_set():
            return
        conn = connection(url)
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        conn.request("POST", path, body=body, headers=headers)
        reply = conn.getresponse()
        print(f"{time.monotonic() - started:5.1f} s: POST {path} -> {reply.status}")
        reply.read()
        conn.close()


def parse(text):
    """Prometheus text format -> {(name, ((label, value), ...)): value}."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, rest = series.partition("{")
        labels = []
        for pair in filter(None, rest.rstrip("}").split(",")):
            key, _, val = pair.partition("=")
            labels.append((key, val.strip('"')))
        samples[(name, tuple(sorted(labels)))] = float(value)
    return samples


def scrape(url, stop, scrapes, started):
    conn = connection(url)
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            scrapes.append((time.monotonic() - started, parse(text)))
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = connection(url)
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))


def total(sample, name, **want):
    """The sum of the series named `name` whose labels include `want`."""
    return sum(v for (n, labels), v in sample.items()
               if n == name and all(dict(labels).get(k) == w for k, w in want.items()))


def label_sets(scrapes, name, keys):
    found = set()
    for _, sample in scrapes:
        for (n, labels), v in sample.items():
            if n == name and v > 0:
                found.add(tuple(dict(labels).get(k) for k in keys))
    return sorted(found, key=str)


def rate(scrapes, i, name, **want):
    (t0, a), (t1, b) = scrapes[max(0, i - RATE_WINDOW)], scrapes[i]
    return (total(b, name, **want) - total(a, name, **want)) / (t1 - t0) if t1 > t0 else math.nan


def quantile(q, scrapes, i, backend):
    """histogram_quantile(q, rate(..._bucket[5s])) for one backend, in seconds."""
    a, b = scrapes[max(0, i - RATE_WINDOW)][1], scrapes[i][1]
    name = "tiered_ratelimit_store_duration_seconds_bucket"
    buckets = {}
    for (n, labels), v in b.items():
        labels = dict(labels)
        if n == name and labels.get("backend") == backend:
            le = float(labels["le"])
            key = tuple(sorted(labels.items()))
            buckets[le] = v - a.get((n, key), 0.0)
    if not buckets or buckets.get(math.inf, 0.0) <= 0:
        return math.nan
    les = sorted(buckets)
    counts = [buckets[le] for le in les]
    rank = q * counts[-1]
    at = bisect.bisect_left(counts, rank)
    if les[at] == math.inf:
        return les[-2]
    low, below = (les[at - 1], counts[at - 1]) if at > 0 else (0.0, 0.0)
    inside = counts[at] - below
    return low + (les[at] - low) * ((rank - below) / inside if inside else 1.0)


def draw(scrapes, out, title):
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    checks = "tiered_ratelimit_checks_total"
    t = [s[0] for s in scrapes]
    idx = range(len(scrapes))
    fallback_at = next((ts for ts, s in scrapes
                        if total(s, "tiered_ratelimit_fallbacks_total") > 0), None)
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True)
    (a_checks, a_ratio), (a_latency, a_events) = axes

    for decision, tier in label_sets(scrapes, checks, ("decision", "tier")):
        ys = [rate(scrapes, i, checks, decision=decision, tier=tier) for i in idx]
        a_checks.plot(t, ys, label=f"{decision} {tier}")
    a_checks.set_title("Checks per second, by decision and tier")
    a_checks.set_ylabel("checks/s")

    for decision in ("denied", "shadow_denied", "blocked"):
        ys = [rate(scrapes, i, checks, decision=decision) / (rate(scrapes, i, checks) or math.nan)
              for i in idx]
        if any(y > 0 for y in ys):
            a_ratio.plot(t, [100 * y for y in ys], label=decision)
    a_ratio.set_title("Denial ratio")
    a_ratio.set_ylabel("% of checks")
    a_ratio.set_ylim(0, 100)

    backends = label_sets(scrapes, "tiered_ratelimit_store_duration_seconds_count", ("backend",))
    for (backend,) in backends:
        for q in (0.5, 0.99):
            ys = [1000 * quantile(q, scrapes, i, backend) for i in idx]
            a_latency.plot(t, ys, label=f"p{round(q * 100)} {backend}")
    a_latency.set_title("Store latency (from the histogram's buckets)")
    a_latency.set_ylabel("ms (log scale)")
    if a_latency.lines:
        a_latency.set_yscale("log")
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        a_latency.yaxis.set_major_formatter(plain)
        a_latency.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    a_latency.set_xlabel("seconds since the start of the load")

    for name, key, what in (
        ("tiered_ratelimit_store_errors_total", "backend", "store errors"),
        ("tiered_ratelimit_fallbacks_total", "reason", "fallback"),
        ("tiered_ratelimit_recoveries_total", None, "recoveries"),
    ):
        for labels in label_sets(scrapes, name, (key,) if key else ()):
            want = {key: labels[0]} if key else {}
            ys = [total(s, name, **want) for _, s in scrapes]
            a_events.step(t, ys, where="post", label=f"{what} {labels[0] if key else ''}")
    blocked = [total(s, checks, decision="blocked") for _, s in scrapes]
    if any(blocked):
        a_events.step(t, blocked, where="post", label="blocked checks")
    a_events.set_title("Store errors, fallbacks, blocks (totals since start)")
    a_events.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a_events.set_xlabel("seconds since the start of the load")

    for ax in axes.flat:
        if fallback_at is not None:
            ax.axvline(fallback_at, color="grey", linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8, loc="upper left")
    if fallback_at is not None:
        a_checks.annotate(" fallback to memory", (fallback_at, 1),
                          xycoords=("data", "axes fraction"), xytext=(0, -12),
                          textcoords="offset points", fontsize=8, color="grey")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


def write_csv(path, scrapes):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seconds", "metric", "labels", "value"])
        for ts, sample in scrapes:
            for (name, labels), value in sorted(sample.items()):
                writer.writerow([f"{ts:.3f}", name, ",".join(f"{k}={v}" for k, v in labels), value])


def read_csv(path):
    by_time = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            labels = tuple(sorted(tuple(kv.split("=", 1)) for kv in row["labels"].split(",") if kv))
            sample = by_time.setdefault(float(row["seconds"]), {})
            sample[(row["metric"], labels)] = float(row["value"])
    return sorted(by_time.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:3000", help="the running demo")
    parser.add_argument("--seconds", type=float, default=75, help="how long to drive load")
    parser.add_argument("--out", default="docs/metrics.png", help="the picture to write")
    parser.add_argument("--csv", help="also write every scraped sample here")
    parser.add_argument("--from-csv", help="drive no load: draw the scrapes a --csv run saved")
    parser.add_argument("--admin-token", help="the demo's --admin-token: mallory is then "
                        "blocked at --block-at seconds and unblocked at --unblock-at")
    parser.add_argument("--block-at", type=float, default=20)
    parser.add_argument("--unblock-at", type=float, default=35)
    parser.add_argument("--title", default="The demo under load, as its /metrics showed it "
                        "(scraped every second)")
    args = parser.parse_args()

    if args.from_csv:
        draw(read_csv(args.from_csv), args.out, args.title)
        return
    stop = threading.Event()
    scrapes = []
    started = time.monotonic()
    jobs = [(scrape, (args.url, stop, scrapes, started))]
    jobs += [(drive, (args.url, stop, n, path, user)) for user, n, path in USERS]
    # Each crowd from two connections, so that one slow answer does not stall it.
    jobs += [(drive, (args.url, stop, n / 2, path)) for n, path in CROWDS for _ in range(2)]
    if args.admin_token:
        jobs.append((operate, (args.url, args.admin_token, stop, started, args.block_at,
                               args.unblock_at)))
    threads = [threading.Thread(target=target, args=a) for target, a in jobs]
    for thread in threads:
        thread.start()
    try:
        time.sleep(args.seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    print(f"{len(scrapes)} scrapes over {args.seconds:.0f} s")
    if len(scrapes) < 2:
        raise SystemExit("fewer than two scrapes: is the demo running at --url?")
    if args.csv:
        write_csv(args.csv, scrapes)
    last = scrapes[-1][1]
    for decision in ("allowed", "denied", "shadow_denied", "blocked"):
        print(f"{decision}: {total(last, 'tiered_ratelimit_checks_total', decision=decision):.0f}")
    print(f"fallbacks: {total(last, 'tiered_ratelimit_fallbacks_total'):.0f}")
    draw(scrapes, args.out, args.title)


if __name__ == "__main__":
    main()
