//! The scheduler's policies on a simulated executor with a virtual clock: the same
//! `scheduler::State` the engine runs, fed a steady stream of short jobs with a long one every
//! `long_every`th (10th, then 40th: nearly all the load from short jobs, where shortest-first
//! starves long ones), at several loads. No model runs, so the figures are exact and repeatable —
//! unlike the mixed-workload benchmark on a shared VM, whose speed drifts between runs — and the
//! unit costs are the default model's on the 2-core CPU (a denoise step ≈ 30 ms, the VAE decode
//! ≈ 200 ms as one unit). Prints figures; asserts nothing.
//!     cargo bench -p fastvideo-engine --bench scheduler_sim

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fastvideo_engine::scheduler::{Capacity, State};
use fastvideo_engine::Policy;

const STEP: f64 = 0.03;
const DECODE: f64 = 0.2;
const SHORT_STEPS: u32 = 4;
const LONG_STEPS: u32 = 30;
const JOBS: usize = 8000;

struct Job {
    long: bool,
    high: bool,
    arrived: f64,
    units: Vec<f64>,
    next: usize,
}

fn units(steps: u32) -> Vec<f64> {
    let mut u = vec![STEP; steps as usize];
    u.push(DECODE);
    u
}

fn solo(steps: u32) -> f64 {
    units(steps).iter().sum()
}

/// Deterministic jitter in [0.5, 1.5) × gap (a fixed LCG), so arrivals are not lock-step.
fn gaps(mean: f64) -> impl Iterator<Item = f64> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    std::iter::repeat_with(move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        mean * (0.5 + (x >> 11) as f64 / (1u64 << 53) as f64)
    })
}

/// Response times (short, long) of every job.
fn simulate(policy: Policy, stretch: f64, load: f64, long_every: usize) -> (Vec<f64>, Vec<f64>) {
    let (short, long, _) = simulate_classes(policy, stretch, load, long_every, 0);
    (short, long)
}

/// As [`simulate`], with every `high_every`th short job (0: none) at priority 1: response times
/// of the priority-0 short jobs, the (priority-0) long ones, and the priority-1 ones.
fn simulate_classes(
    policy: Policy,
    stretch: f64,
    load: f64,
    long_every: usize,
    high_every: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let per_cycle = solo(LONG_STEPS) + (long_every - 1) as f64 * solo(SHORT_STEPS);
    let mean_gap = per_cycle / long_every as f64 / load;
    let t0 = Instant::now();
    let at = |t: f64| t0 + Duration::from_secs_f64(t);
    let mut state =
        State::new(policy, 0.05, Capacity { max_active: 16, memory_bytes: u64::MAX }).with_max_stretch(stretch, 0.5);
    let mut arrivals = gaps(mean_gap).scan(0.0, |t, g| {
        *t += g;
        Some(*t)
    });
    let mut next_arrival = arrivals.next().unwrap();
    let (mut jobs, mut admitted) = (BTreeMap::<u64, Job>::new(), 0usize);
    let (mut now, mut short, mut long, mut high) = (0.0f64, Vec::new(), Vec::new(), Vec::new());
    while admitted < JOBS || !jobs.is_empty() {
        while admitted < JOBS && next_arrival <= now {
            let long = admitted % long_every == 0;
            let high = !long && high_every > 0 && admitted % high_every == 1;
            let u = units(if long { LONG_STEPS } else { SHORT_STEPS });
            state.add(admitted as u64, high as i32, u.iter().sum(), 1, at(next_arrival));
            jobs.insert(admitted as u64, Job { long, high, arrived: next_arrival, units: u, next: 0 });
            admitted += 1;
            next_arrival = arrivals.next().unwrap();
        }
        let Some(k) = state.pick(at(now)) else {
            now = next_arrival; // idle until the next arrival
            continue;
        };
        let job = jobs.get_mut(&k).unwrap();
        let dt = job.units[job.next];
        state.ran(at(now), dt);
        now += dt;
        job.next += 1;
        if job.next == job.units.len() {
            let job = jobs.remove(&k).unwrap();
            state.remove(k);
            let class = match (job.high, job.long) {
                (true, _) => &mut high,
                (false, true) => &mut long,
                (false, false) => &mut short,
            };
            class.push(now - job.arrived);
        } else {
            state.set_remaining(k, job.units[job.next..].iter().sum());
        }
    }
    (short, long, high)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let (s_solo, l_solo) = (solo(SHORT_STEPS), solo(LONG_STEPS));
    println!(
        "{JOBS} jobs; solo: short {s_solo:.2} s, long {l_solo:.2} s; figures are multiples of the class's solo time"
    );
    println!("| long jobs | load | policy | short p50 | short p95 | long p50 | long p95 | long max |");
    println!("|---|---|---|---|---|---|---|---|");
    for long_every in [10, 40] {
        for load in [0.7, 0.8, 0.9, 0.95, 1.0, 1.1] {
            for (name, policy, stretch) in [
                ("fifo", Policy::Fifo, f64::INFINITY),
                ("shortest_remaining, no bound", Policy::ShortestRemaining, f64::INFINITY),
                ("shortest_remaining, max stretch 3, share 0.5", Policy::ShortestRemaining, 3.0),
            ] {
                let (mut s, mut l) = simulate(policy, stretch, load, long_every);
                println!(
                    "| every {long_every}th | {load} | {name} | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x |",
                    pct(&mut s, 0.5) / s_solo,
                    pct(&mut s, 0.95) / s_solo,
                    pct(&mut l, 0.5) / l_solo,
                    pct(&mut l, 0.95) / l_solo,
                    pct(&mut l, 1.0) / l_solo,
                );
            }
        }
    }
    // Priority classes: every other short job at priority 1 (about 45 % of the load), the rest
    // (the long jobs too) at 0. The stretch bound must hold for the low class as well.
    println!();
    println!("| load | high class | high p95 | low short p95 | low short max | long p95 | long max |");
    println!("|---|---|---|---|---|---|---|");
    for load in [0.8, 0.9, 0.95, 1.0] {
        let (mut s, mut l, mut h) = simulate_classes(Policy::ShortestRemaining, 3.0, load, 10, 2);
        println!(
            "| {load} | every 2nd short | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x |",
            pct(&mut h, 0.95) / s_solo,
            pct(&mut s, 0.95) / s_solo,
            pct(&mut s, 1.0) / s_solo,
            pct(&mut l, 0.95) / l_solo,
            pct(&mut l, 1.0) / l_solo,
        );
    }
}
