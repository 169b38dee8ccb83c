//! `fastvideo-fuzz [TARGET…] [--iterations N] [--seed S] [--corpus DIR] [--crashes DIR] [--trace]`:
//! runs each target (all by default) for N mutated inputs, prints executions per second and
//! crashes, writes each crashing input to the crashes folder, and exits 1 if any target crashed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use fastvideo_fuzz::{corpus, run, TARGETS};

fn main() -> Result<()> {
    let mut names = Vec::new();
    let (mut iterations, mut seed, mut trace) = (1_000_000u64, 1u64, false);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (mut corpus_dir, mut crash_dir) = (root.join("corpus"), PathBuf::from("fuzz-crashes"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |flag: &str| args.next().with_context(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--iterations" => iterations = value("--iterations")?.parse().context("--iterations: a number")?,
            "--seed" => seed = value("--seed")?.parse().context("--seed: a number")?,
            "--corpus" => corpus_dir = value("--corpus")?.into(),
            "--crashes" => crash_dir = value("--crashes")?.into(),
            "--trace" => trace = true,
            "--list" => {
                for t in TARGETS {
                    println!("{:16} {}", t.name, t.what);
                }
                return Ok(());
            }
            n if !n.starts_with('-') => names.push(n.to_string()),
            other => bail!("unknown flag {other} (see the doc comment of host/fuzz/src/main.rs)"),
        }
    }
    for n in &names {
        if !TARGETS.iter().any(|t| t.name == n) {
            bail!("unknown target `{n}`; --list shows them");
        }
    }
    let mut crashed = false;
    println!("| target | executions | seconds | executions/s | crashes |");
    println!("|---|---|---|---|---|");
    for t in TARGETS.iter().filter(|t| names.is_empty() || names.iter().any(|n| n == t.name)) {
        let seeds = corpus(&corpus_dir, t).with_context(|| format!("reading the {} corpus", t.name))?;
        let trace_file = crash_dir.join(format!("{}.current", t.name));
        if trace {
            std::fs::create_dir_all(&crash_dir)?;
        }
        let t0 = Instant::now();
        let report = run(t, &seeds, iterations, seed, |input| {
            if trace {
                let _ = std::fs::write(&trace_file, input);
            }
        });
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "| {} | {} | {secs:.1} | {:.0} | {} |",
            t.name,
            report.executions,
            report.executions as f64 / secs,
            report.crashes.len()
        );
        for (input, msg) in &report.crashes {
            crashed = true;
            std::fs::create_dir_all(&crash_dir)?;
            let path = crash_dir.join(format!("{}-{}", t.name, &blake3::hash(input).to_hex()[..16]));
            std::fs::write(&path, input)?;
            eprintln!("crash in {}: {msg} (input in {})", t.name, path.display());
        }
    }
    if crashed {
        std::process::exit(1);
    }
    Ok(())
}
