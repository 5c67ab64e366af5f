//! The in-memory comparison's three target cases (issue 11, item 3) in many short paired
//! rounds: each round times ours and then governor's three `check_key`s (the other way round
//! every other round) for about MS milliseconds each, and takes their ratio. The two sides of a
//! round run back to back, so that what the machine does to both (where a virtual machine's
//! two vCPUs land, a neighbour's load) is mostly the same, where criterion's samples of the
//! two sides are seconds apart; the median of the rounds' ratios is then steadier than a ratio
//! of medians, and the quartiles show how far the rounds spread.
//!
//! ```text
//! cargo run --release -p tiered-ratelimit-benches --example pair_check -- 31 200
//! ```
//!
//! Arguments: ROUNDS (default 31), MS per side and round (default 200). The cases are those of
//! `cargo bench -p tiered-ratelimit-benches --bench check` (`shared/memory_cases.rs`): one
//! thread on hot keys, two threads on the same keys, two threads over 100,000 users.
use std::process::ExitCode;
use std::time::Duration;

#[path = "shared/memory_cases.rs"]
mod memory_cases;

use memory_cases::{Case, Setup};

/// The value at `q` (0 to 1) of sorted `v`, by linear interpolation.
fn quantile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// How many checks of `run` take about `target`.
fn calibrate(run: impl Fn(u64) -> Duration, target: Duration) -> u64 {
    let mut n = 1_000;
    loop {
        let took = run(n);
        if took >= target / 4 || n >= 1 << 32 {
            let per = took.as_secs_f64() / n as f64;
            return ((target.as_secs_f64() / per) as u64).max(1_000);
        }
        n *= 4;
    }
}

fn main() -> ExitCode {
    let args: Vec<u64> = match std::env::args().skip(1).map(|a| a.parse()).collect() {
        Ok(args) => args,
        Err(_) => {
            eprintln!("usage: pair_check [ROUNDS] [MS]");
            return ExitCode::from(2);
        }
    };
    let rounds = args.first().copied().unwrap_or(31).max(1);
    let target = Duration::from_millis(args.get(1).copied().unwrap_or(200).max(1));
    println!(
        "| case | ours (ns/check), median | governor (ns/check), median | ours / governor: median of the rounds' ratios | quartiles | lowest, highest |"
    );
    println!("|---|---:|---:|---:|---|---|");
    for case in [Case::HotKeys, Case::SameKeys, Case::Users { threads: 2 }] {
        let setup = Setup::new(case);
        let n_ours = calibrate(|n| setup.ours(n), target);
        let n_gov = calibrate(|n| setup.governor(n), target);
        let ns = |took: Duration, n: u64| took.as_secs_f64() * 1e9 / n as f64;
        let (mut ours, mut gov, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (o, g) = if round % 2 == 0 {
                let o = ns(setup.ours(n_ours), n_ours);
                (o, ns(setup.governor(n_gov), n_gov))
            } else {
                let g = ns(setup.governor(n_gov), n_gov);
                (ns(setup.ours(n_ours), n_ours), g)
            };
            eprintln!(
                "{} round {round}: ours {o:.1} ns, governor {g:.1} ns, ratio {:.3}",
                case.name(),
                o / g
            );
            ours.push(o);
            gov.push(g);
            ratios.push(o / g);
        }
        for v in [&mut ours, &mut gov, &mut ratios] {
            v.sort_by(f64::total_cmp);
        }
        println!(
            "| {} | {:.1} | {:.1} | **{:.2}x** | {:.2}–{:.2} | {:.2}, {:.2} |",
            case.name(),
            quantile(&ours, 0.5),
            quantile(&gov, 0.5),
            quantile(&ratios, 0.5),
            quantile(&ratios, 0.25),
            quantile(&ratios, 0.75),
            ratios[0],
            ratios[ratios.len() - 1],
        );
    }
    ExitCode::SUCCESS
}
