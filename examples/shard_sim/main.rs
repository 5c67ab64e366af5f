//! The shard simulator: the global tier split over `global_shards` keys, as the Redis Cluster
//! store walks them (the crate's own `tiered_ratelimit::shards` code), against modelled shards
//! (exact sliding logs in memory). Prints, per setting and demand level, the requests
//! admitted, the requests wrongly denied (denied while the shards together had room) and the
//! scripts run per request; checks that no window ever held more than the limit.
//!
//! ```sh
//! cargo run --release --example shard_sim                 # the table of docs/SCALE.md
//! cargo run --release --example shard_sim -- --costs 4    # costs uniform in 1..=4
//! cargo run --release --example shard_sim -- --plain      # one try, no cache, no split
//! cargo run --release --example shard_sim -- --costs 4 --no-split  # fixed caps alone
//! ```

use clap::Parser;

mod sim;

use sim::{Params, Pattern};

/// The shard simulator (see the module docs).
#[derive(Parser, Debug)]
struct Args {
    /// The global limit per window.
    #[arg(long, default_value_t = 10_000)]
    limit: u64,
    /// Run length, in windows (of 60 s).
    #[arg(long, default_value_t = 5)]
    windows: u64,
    /// Costs uniform in 1..=COSTS.
    #[arg(long, default_value_t = 1)]
    costs: u64,
    /// The plain design, for comparison: one shard per request (round robin), no full-until
    /// cache, no split.
    #[arg(long)]
    plain: bool,
    /// One round trip to a shard, in µs (the time between two tries of one request).
    #[arg(long, default_value_t = 500)]
    rtt: u64,
    /// Never split a cost over several shards (fixed caps alone).
    #[arg(long)]
    no_split: bool,
    /// Shard counts to run (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    shards: Vec<usize>,
    /// Instance counts to run (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "10,100")]
    instances: Vec<usize>,
}

const DEMANDS: [f64; 7] = [0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 3.0];

fn main() {
    let args = Args::parse();
    println!(
        "limit {} per 60 s window, {} windows, costs 1..={}, round trip {} µs, {}",
        args.limit,
        args.windows,
        args.costs,
        args.rtt,
        if args.plain {
            "plain: one try, no cache, no split"
        } else {
            "the store's walk: every shard, full-until cache, split costs"
        }
    );
    println!("| S | instances | demand | admitted % (poisson/bursty/skewed) | wrongly denied % | scripts per request | max live / limit |");
    println!("|---|---|---|---|---|---|---|");
    let mut over = false;
    for &shards in &args.shards {
        for &instances in &args.instances {
            for demand in DEMANDS {
                let outcomes = Pattern::ALL.map(|pattern| {
                    sim::run(&Params {
                        limit: args.limit,
                        window: 60_000_000,
                        shards,
                        instances,
                        demand,
                        pattern,
                        max_cost: args.costs,
                        windows: args.windows,
                        tries: if args.plain { 1 } else { shards },
                        cache: !args.plain,
                        split: !args.plain && !args.no_split,
                        rtt: args.rtt,
                        seed: 14 + shards as u64 * 1_000 + instances as u64,
                    })
                });
                let three = |f: &dyn Fn(&sim::Outcome) -> f64| {
                    outcomes
                        .iter()
                        .map(|o| format!("{:.2}", f(o)))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let max_live = outcomes.iter().map(|o| o.max_live).max().unwrap_or(0);
                over |= max_live > args.limit;
                println!(
                    "| {shards} | {instances} | {demand}x | {} | {} | {} | {:.4} |",
                    three(&|o| 100.0 * o.admitted_fraction()),
                    three(&|o| 100.0 * o.wrong_fraction()),
                    three(&|o| o.calls_per_request()),
                    max_live as f64 / args.limit as f64,
                );
            }
        }
    }
    assert!(!over, "some window held more than the limit");
}
