//! `fastvideo bench-parallel --check-collectives`: the NCCL all-to-all on this machine's GPUs
//! against the in-process exchange (exact: both only move bytes), with uneven pieces in bf16
//! and fp32, and its bandwidth at the size of a Wan-1.3B attention exchange. On one GPU this
//! is a group of one (NCCL's send/recv to itself): it checks the binding, the dtype mapping and
//! the ordering against libtorch's stream, not the interconnect.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

use crate::comm::Communicator;
use crate::{local, nccl};

/// Runs the check on GPUs `0..gpus`.
pub fn run(gpus: usize) -> Result<Value> {
    ensure!(gpus >= 1, "the collective check needs at least one CUDA device");
    let version = nccl::version()?;
    let ordinals: Vec<usize> = (0..gpus).collect();
    let devices: Vec<Device> = ordinals.iter().map(|&i| Device::Cuda(i)).collect();
    let nccl: Vec<Arc<dyn Communicator>> = nccl::group(&ordinals)?.into_iter().map(|c| Arc::new(c) as _).collect();
    let local: Vec<Arc<dyn Communicator>> = local::group(&devices).into_iter().map(|c| Arc::new(c) as _).collect();
    let mut exact = Vec::new();
    for kind in [Kind::BFloat16, Kind::Float] {
        // Rank r sends r+j+1 rows of 37 values to rank j (uneven, odd sizes).
        let by_nccl = exchange(&nccl, &devices, kind, 37, 3, true)?;
        let by_copies = exchange(&local, &devices, kind, 37, 3, true)?;
        let same = by_nccl.iter().zip(&by_copies).all(|(a, b)| a.equal(b));
        ensure!(same, "NCCL's all-to-all differs from the in-process exchange in {kind:?}");
        exact.push(format!("{kind:?}"));
    }
    // Bandwidth: one Ulysses exchange of Wan-1.3B at 480x832x81 (q, k, v of 32,760 tokens x
    // 1536 in bf16 = 302 MB per rank), split over the ranks.
    let per_rank = 3 * 32_760 * 1536 / gpus as i64;
    let mut times = Vec::new();
    for _ in 0..6 {
        let t0 = Instant::now();
        exchange(&nccl, &devices, Kind::BFloat16, per_rank / gpus as i64, 0, false)?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let secs = times[times.len() / 2];
    let bytes = (per_rank * 2) as f64;
    Ok(json!({
        "nccl_version": version,
        "gpus": gpus,
        "exact_vs_in_process": exact,
        "exchange_bytes_per_rank": bytes,
        "exchange_s": secs,
        "per_rank_gb_s": bytes / secs / 1e9,
    }))
}

/// One all-to-all over `comms` (one thread per rank); rank `r` sends `base + (r + j) * step`
/// values to rank `j`, filled with values that name sender, receiver and position. Returns every
/// rank's received pieces joined (copied to the CPU with `to_host`), after synchronising.
fn exchange(
    comms: &[Arc<dyn Communicator>],
    devices: &[Device],
    kind: Kind,
    base: i64,
    step: i64,
    to_host: bool,
) -> Result<Vec<Tensor>> {
    let n = comms.len() as i64;
    let len = move |from: i64, to: i64| base + (from + to) * step;
    let outs: Vec<Result<Tensor>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .zip(devices)
            .enumerate()
            .map(|(r, (c, &d))| {
                s.spawn(move || {
                    let r = r as i64;
                    let send: Vec<Tensor> = (0..n)
                        .map(|j| {
                            (Tensor::arange(len(r, j), (Kind::Float, d)) + (1000 * r + 100 * j) as f64).to_kind(kind)
                        })
                        .collect();
                    let shapes: Vec<Vec<i64>> = (0..n).map(|i| vec![len(i, r)]).collect();
                    let got = Tensor::cat(&c.all_to_all(&send, &shapes)?, 0);
                    if let Device::Cuda(i) = d {
                        tch::Cuda::synchronize(i as i64);
                    }
                    Ok(if to_host { got.to_device(Device::Cpu) } else { got })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
    });
    outs.into_iter().collect()
}
