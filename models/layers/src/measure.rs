//! Measuring a model's parts the same way in every family's benchmarks: device-synchronised
//! timing with a warm-up and medians, per-phase device memory (the allocator's peaks reset at
//! each phase), the host's peak memory, and PSNR for lossy paths. `fastvideo bench`,
//! `bench-lora`, `bench-parallel` and `bench-lm` report through these, so their figures mean
//! the same thing whichever family they time.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

/// One phase's device memory, measured alone: the allocator's cache is emptied and its peaks
/// reset when the phase starts, so what an earlier phase left cached does not count here.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseMemory {
    /// The phase's name (`forward`, `cfg_step`, `vae_decode` …).
    pub phase: &'static str,
    /// Live tensors when the phase starts (the loaded weights and what the bench holds).
    pub start_allocated_bytes: Option<u64>,
    /// Live tensors at most during the phase.
    pub peak_allocated_bytes: Option<u64>,
    /// What the allocator held from the driver at most: allocated plus fragmentation.
    pub peak_reserved_bytes: Option<u64>,
    /// The driver's used memory after the phase (cache and other processes included).
    pub driver_used_after_bytes: Option<u64>,
}

/// Runs `f` as one measured phase (see [`PhaseMemory`]), appending its memory to `into`.
pub fn phase<T>(
    dev: Device,
    name: &'static str,
    into: &mut Vec<PhaseMemory>,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    use fastvideo_kernels::cuda::{allocator_memory, memory_used, reset_allocator_peak};
    let ordinal = fastvideo_kernels::cuda::ordinal(dev);
    sync(dev);
    let start = ordinal.filter(|i| reset_allocator_peak(*i, true)).and_then(allocator_memory);
    let out = f()?;
    sync(dev);
    let end = start.and(ordinal).and_then(allocator_memory);
    into.push(PhaseMemory {
        phase: name,
        start_allocated_bytes: start.map(|m| m.allocated),
        peak_allocated_bytes: end.map(|m| m.peak_allocated),
        peak_reserved_bytes: end.map(|m| m.peak_reserved),
        driver_used_after_bytes: ordinal.and_then(memory_used),
    });
    Ok(out)
}

/// The highest of `get` over the named phases that have it.
pub fn peak_of(phases: &[PhaseMemory], names: &[&str], get: impl Fn(&PhaseMemory) -> Option<u64>) -> Option<u64> {
    phases.iter().filter(|p| names.contains(&p.phase)).filter_map(get).max()
}

/// Waits for `device`'s queued work (a no-op on the CPU), so a clock read after it times the
/// work, not its launch.
pub fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// [`sync`] on every distinct device of `devices` (a model split over GPUs).
pub fn sync_all(devices: &[Device]) {
    let mut seen: Vec<Device> = Vec::new();
    for d in devices {
        if !seen.contains(d) {
            sync(*d);
            seen.push(*d);
        }
    }
}

/// The median of `v` (sorted in place); `v` must not be empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` (synchronising the device around it): one warm-up, then `runs` timed calls. The
/// previous call's result is dropped before the next starts, so a phase's memory peak is what
/// one call needs.
pub fn time<T>(device: Device, runs: usize, mut f: impl FnMut() -> Result<T>) -> Result<(Vec<f64>, T)> {
    let mut last = Some(f()?);
    sync(device);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        drop(last.take());
        let t = Instant::now();
        last = Some(f()?);
        sync(device);
        times.push(t.elapsed().as_secs_f64());
    }
    Ok((times, last.expect("at least one call")))
}

/// PSNR in dB of `a` against `reference`, both in [-1, 1].
pub fn psnr(a: &Tensor, reference: &Tensor) -> f64 {
    let mse = f64::try_from((a - reference).to_kind(Kind::Double).square().mean(Kind::Double)).unwrap_or(f64::NAN);
    10.0 * (4.0 / mse.max(1e-20)).log10()
}

/// Peak resident set size of this process (`VmHWM` in /proc/self/status), in bytes: what a
/// load report gives as the host memory a load took.
pub fn host_peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
