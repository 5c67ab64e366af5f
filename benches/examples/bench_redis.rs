//! The client of `benches/redis.sh`: checks per second of our limiter on Redis.
//!
//! ```text
//! cargo run --release -p tiered-ratelimit-benches --example bench_redis -- --redis redis://127.0.0.1:6379 \
//!     [--concurrency 16] [--checks 200000] [--warmup 20000] [--users 10000] [--window 1s] \
//!     [--time-source app|redis] [--timeout 1s] [--workers 1] [--limiters 1] [--cost 1]
//! ```
//!
//! One `RateLimiter::connect(config)` on the Redis URL, three tiers on (user, endpoint `/bench`,
//! global), every limit 2^40 in the window: every check is admitted, one EVALSHA each. Check
//! `i` is made by user `i % users` (named with 12 digits, `000000001234`, the shape
//! redis-benchmark's `__rand_int__` gives), so no user key grows large. `--concurrency` tokio
//! tasks share the checks; first `--warmup` checks, untimed, then `--checks` timed ones.
//! `--limiters N` connects N limiters (N connections, as N app instances would) and task `t`
//! checks through limiter `t % N`; `--cost N` makes every check spend N units (`check_n`).
//!
//! Prints one line, `result key=value ...`, with the checks made in all (warm-up included: the
//! script divides EVALSHA calls by it), the timed rate and the latency percentiles. Exits
//! non-zero if any check was denied or the limiter left Redis (fell back to memory): the
//! figures would not be Redis figures then.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tiered_ratelimit::config::parse_duration;
use tiered_ratelimit::{Backend, RateLimitConfig, RateLimiter, TimeSource};

const USAGE: &str = "\
usage: bench_redis --redis URL [--concurrency N] [--checks N] [--warmup N] [--users N]
                   [--window DURATION] [--time-source app|redis] [--timeout DURATION]
                   [--workers N] [--limiters N] [--cost N]

  --redis URL              the Redis to use (required)
  --concurrency N          tokio tasks checking at once (default 16)
  --checks N               timed checks, shared by the tasks (default 200000)
  --warmup N               untimed checks first (default 20000)
  --users N                distinct users, check i by user i % N (default 10000)
  --window DURATION        the sliding window (default 1s)
  --time-source app|redis  who supplies `now`: the app (default) or Redis TIME
  --timeout DURATION       Redis command timeout (default 1s; 100ms is the crate's default, a
                           busy machine can exceed it and the limiter would fall back)
  --workers N              tokio worker threads (default 1)
  --limiters N             limiters (connections) sharing the tasks (default 1)
  --cost N                 units each check spends (default 1)
";

/// Limits never reached: every check takes the admitted path.
const HUGE: u64 = 1 << 40;
const ENDPOINT: &str = "/bench";

struct Args {
    redis: String,
    concurrency: usize,
    checks: usize,
    warmup: usize,
    users: usize,
    window: Duration,
    time_source: TimeSource,
    timeout: Duration,
    workers: usize,
    limiters: usize,
    cost: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        redis: String::new(),
        concurrency: 16,
        checks: 200_000,
        warmup: 20_000,
        users: 10_000,
        window: Duration::from_secs(1),
        time_source: TimeSource::App,
        timeout: Duration::from_secs(1),
        workers: 1,
        limiters: 1,
        cost: 1,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if flag == "-h" || flag == "--help" {
            print!("{USAGE}");
            std::process::exit(0);
        }
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let count = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number"))
        };
        let duration = |v: &str| parse_duration(v).map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--redis" => args.redis = value,
            "--concurrency" => args.concurrency = count(&value)?,
            "--checks" => args.checks = count(&value)?,
            "--warmup" => args.warmup = count(&value)?,
            "--users" => args.users = count(&value)?,
            "--window" => args.window = duration(&value)?,
            "--timeout" => args.timeout = duration(&value)?,
            "--workers" => args.workers = count(&value)?,
            "--limiters" => args.limiters = count(&value)?,
            "--cost" => args.cost = count(&value)? as u64,
            "--time-source" => {
                args.time_source = match value.as_str() {
                    "app" => TimeSource::App,
                    "redis" => TimeSource::Redis,
                    other => return Err(format!("--time-source: {other:?} is not app or redis")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.redis.is_empty() {
        return Err("--redis is required".into());
    }
    if [
        args.concurrency,
        args.users,
        args.workers,
        args.checks,
        args.limiters,
    ]
    .contains(&0)
        || args.cost == 0
    {
        return Err(
            "--concurrency, --checks, --users, --workers, --limiters and --cost must be positive"
                .into(),
        );
    }
    Ok(args)
}

/// What one phase measured.
struct Phase {
    elapsed: Duration,
    /// Per-check latency, µs, all tasks.
    latencies_us: Vec<u32>,
    denied: usize,
}

/// `total` checks of `cost` from `concurrency` tasks at once, task `t` through limiter
/// `t % limiters.len()`; check `first + k` by user `(first + k) % users`.
async fn phase(
    limiters: &[RateLimiter],
    users: &Arc<Vec<String>>,
    (concurrency, cost): (usize, u64),
    first: usize,
    total: usize,
) -> Result<Phase, String> {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for t in 0..concurrency {
        let limiter = limiters[t % limiters.len()].clone();
        let users = users.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(total / concurrency + 1);
            let mut denied = 0;
            // Task t makes checks t, t + c, t + 2c, ... of this phase.
            for k in (t..total).step_by(concurrency) {
                let user = &users[(first + k) % users.len()];
                let begin = Instant::now();
                let decision = limiter.check_n(user, ENDPOINT, cost).await;
                let us = begin.elapsed().as_micros();
                latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                if !decision.allowed() {
                    denied += 1;
                }
            }
            (latencies, denied)
        }));
    }
    let mut latencies_us = Vec::with_capacity(total);
    let mut denied = 0;
    for task in tasks {
        let (latencies, d) = task.await.map_err(|e| format!("a task failed: {e}"))?;
        latencies_us.extend(latencies);
        denied += d;
    }
    Ok(Phase {
        elapsed: start.elapsed(),
        latencies_us,
        denied,
    })
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run(args: Args) -> Result<(), String> {
    let config = RateLimitConfig::builder()
        .window(args.window)
        .user_limit(HUGE)
        .endpoint_limit(HUGE)
        .global_limit(HUGE)
        .redis_url(args.redis.clone())
        .redis_command_timeout(args.timeout)
        .redis_time_source(args.time_source)
        .build()
        .map_err(|e| format!("config: {e}"))?;
    let mut limiters = Vec::with_capacity(args.limiters);
    for _ in 0..args.limiters {
        let limiter = RateLimiter::connect(config.clone()).await;
        if limiter.backend() != Backend::Redis {
            return Err(format!("could not use Redis at {}", args.redis));
        }
        limiters.push(limiter);
    }
    let load = (args.concurrency, args.cost);
    let users: Arc<Vec<String>> = Arc::new((0..args.users).map(|i| format!("{i:012}")).collect());

    let warm = if args.warmup > 0 {
        Some(phase(&limiters, &users, load, 0, args.warmup).await?)
    } else {
        None
    };
    let mut timed = phase(&limiters, &users, load, args.warmup, args.checks).await?;
    if limiters.iter().any(|l| l.backend() != Backend::Redis) {
        return Err(
            "the limiter fell back to memory during the run (a Redis error or a check \
             slower than --timeout): these are not Redis figures"
                .into(),
        );
    }
    let denied = timed.denied + warm.as_ref().map_or(0, |w| w.denied);
    if denied > 0 {
        return Err(format!(
            "{denied} checks were denied: the limits were meant never to be reached"
        ));
    }
    timed.latencies_us.sort_unstable();
    let secs = timed.elapsed.as_secs_f64();
    println!(
        "result concurrency={} checks={} total_checks={} seconds={:.3} checks_per_sec={:.0} \
         p50_us={} p99_us={} max_us={} backend={:?}",
        args.concurrency,
        args.checks,
        args.checks + args.warmup,
        secs,
        args.checks as f64 / secs,
        percentile(&timed.latencies_us, 50.0),
        percentile(&timed.latencies_us, 99.0),
        timed.latencies_us.last().copied().unwrap_or(0),
        limiters[0].backend(),
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
