//! A small mutation fuzzer on stable Rust (cargo-fuzz needs nightly): each target is a parser
//! that takes untrusted bytes; inputs start from a committed seed corpus and are mutated (bit
//! flips, byte insertions and deletions, chunk duplication, splices of two seeds, and tokens
//! that parsers mishandle: deep nesting, huge numbers, odd quotes). A target must return — an
//! `Err` is fine, a panic is a crash. Crashes are kept (the input and the panic message).
//! A stack overflow aborts the process instead of panicking; the driver's `--trace` writes each
//! input to a file before running it, to catch those.

#![deny(missing_docs)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

mod targets;
pub use targets::{Target, TARGETS};

/// xorshift64*: no dependency, reproducible from the seed.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is taken as 1: xorshift stays at 0 forever).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n` (0 when `n` is 0); the slight modulo bias does not matter here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Byte strings that break parsers more often than random bytes do.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"=",
    b"\n",
    b"\0",
    b"-1",
    b"0",
    b"1e308",
    b"-1e308",
    b"18446744073709551615",
    b"18446744073709551616",
    b"NaN",
    b"null",
    b"true",
    b"[[[[[[[[[[[[[[[[",
    b"{\"a\":",
    b"\xff\xfe",
    b"\xc3",
    b"[x]",
    b"'''",
    b"[[plugins]]",
    b"\"\"\"",
    b"inf",
];

/// One mutation of `input` (possibly spliced with `other`).
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, rng.next_u64() as u8),
            2 if !v.is_empty() => {
                let n = 1 + rng.below(8.min(v.len() - at.min(v.len() - 1)));
                let s = at.min(v.len() - 1);
                v.drain(s..(s + n).min(v.len()));
            }
            3 if !v.is_empty() => {
                // Duplicate a chunk: repetition is how nesting and length bugs show up.
                let s = rng.below(v.len());
                let n = 1 + rng.below((v.len() - s).min(32));
                let chunk: Vec<u8> = v[s..s + n].to_vec();
                for _ in 0..1 + rng.below(64) {
                    v.splice(at.min(v.len())..at.min(v.len()), chunk.iter().copied());
                }
            }
            4 if !other.is_empty() => {
                let s = rng.below(other.len());
                let n = rng.below(other.len() - s + 1);
                v.splice(at..at, other[s..s + n].iter().copied());
            }
            5 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = b"{}[]\":,0 9-.e=\n"[rng.below(15)];
            }
            _ => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let reps = if rng.below(8) == 0 { 1 + rng.below(2000) } else { 1 };
                for _ in 0..reps {
                    v.splice(at.min(v.len())..at.min(v.len()), t.iter().copied());
                }
            }
        }
        v.truncate(max_len);
    }
    v
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    /// Inputs run.
    pub executions: u64,
    /// (input, panic message).
    pub crashes: Vec<(Vec<u8>, String)>,
}

/// The seed corpus of `target`: every file in `dir/<target name>/`.
pub fn corpus(dir: &Path, target: &Target) -> std::io::Result<Vec<Vec<u8>>> {
    let mut seeds = Vec::new();
    let d = dir.join(target.name);
    if d.is_dir() {
        let mut paths: Vec<_> = std::fs::read_dir(&d)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            seeds.push(std::fs::read(p)?);
        }
    }
    if seeds.is_empty() {
        seeds.push(Vec::new());
    }
    Ok(seeds)
}

/// Runs `target` on the seeds themselves, then on `iterations` mutations of them. `before`
/// sees each input before it runs (to write it out when tracing aborts).
pub fn run(target: &Target, seeds: &[Vec<u8>], iterations: u64, seed: u64, mut before: impl FnMut(&[u8])) -> Report {
    let mut rng = Rng::new(seed ^ blake3::hash(target.name.as_bytes()).as_bytes()[0] as u64);
    let mut report = Report::default();
    // Inputs that parsed without error become seeds too (cheap coverage feedback).
    let mut pool: Vec<Vec<u8>> = seeds.to_vec();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut one = |input: &[u8], report: &mut Report| -> bool {
        before(input);
        report.executions += 1;
        match catch_unwind(AssertUnwindSafe(|| (target.run)(input))) {
            Ok(accepted) => accepted,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                report.crashes.push((input.to_vec(), msg));
                false
            }
        }
    };
    for s in seeds {
        one(s, &mut report);
    }
    for _ in 0..iterations {
        let a = rng.below(pool.len());
        let b = rng.below(pool.len());
        let input = mutate(&mut rng, &pool[a], &pool[b], target.max_len);
        if one(&input, &mut report) && pool.len() < 4096 && rng.below(64) == 0 {
            pool.push(input);
        }
    }
    std::panic::set_hook(quiet);
    report
}
