//! The batched paged decode step as CUDA graphs. At batch 1 a decode step of a 28-layer model
//! is ≈ 530 small launches, and the host issuing them (≈ 7 ms) is the step's time: a graph
//! replays them all with one launch.
//!
//! One graph per (rows, table width): the width is the longest block table rounded up to a
//! power of two, so a graph serves many steps as the requests grow. Each graph reads its
//! inputs (token ids, positions, where the new keys go, the block tables, the lengths) from one
//! static int64 buffer the step fills with a single copy before the replay. The graphs share
//! one memory pool (they never run at once). The first step of a shape runs eagerly on the
//! static inputs (libraries initialise outside the capture), then is captured; any failure
//! turns graphs off for the process and the step runs eagerly, as it does off CUDA.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::Result;
use fastvideo_kernels::graph::CudaGraph;
use fastvideo_pipeline::token::{PagedBatch, PagedPlan};
use tch::{Device, Kind, Tensor};

/// Shapes kept; past this, the least recently replayed one is dropped for a new one.
const MAX_GRAPHS: usize = 64;

/// Segments of the input buffer, each padded to 16 bytes (the kernels' alignment).
fn padded(n: usize) -> usize {
    n.div_ceil(2) * 2
}

struct Shape {
    graph: CudaGraph,
    /// The pool whose pages the graph reads and writes, kept alive with it.
    _pool: std::sync::Arc<fastvideo_pipeline::token::KvBlockPool>,
    /// The static inputs: ids, positions, block, offset, lens (`rows` each), then the tables
    /// (`rows × width`).
    inputs: Tensor,
    logits: Tensor,
    /// When it last ran (a step counter), for eviction.
    used: u64,
}

pub struct DecodeGraphs {
    ordinal: usize,
    /// By (pool, rows, table width): a graph holds the pool's addresses.
    shapes: Mutex<HashMap<(usize, usize, usize), Shape>>,
    off: AtomicBool,
    steps: std::sync::atomic::AtomicU64,
}

impl DecodeGraphs {
    /// Graphs for a model on `device`, when it can capture them.
    pub fn for_device(device: Device) -> Option<Self> {
        let Device::Cuda(ordinal) = device else { return None };
        fastvideo_kernels::graph::available(device).then(|| Self {
            ordinal,
            shapes: Mutex::new(HashMap::new()),
            off: AtomicBool::new(false),
            steps: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Logits `[rows, vocab]` of the step `plan` addresses for `tokens`, by replaying its
    /// shape's graph (captured first if new); `None` when graphs are off, and the caller runs
    /// the step eagerly. `body` is the step: ids `[rows, 1]` and the addressing in,
    /// logits out, device work only.
    pub fn run(
        &self,
        tokens: &[i64],
        plan: &PagedPlan,
        body: impl Fn(&Tensor, &PagedBatch) -> Tensor,
    ) -> Result<Option<Tensor>> {
        if self.off.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let rows = plan.rows();
        let width = plan.max_blocks().next_power_of_two().max(4);
        let key = (plan.pool.layer(0).0.data_ptr() as usize, rows, width);
        let host = Self::host_inputs(tokens, plan, width);
        let step = self.steps.fetch_add(1, Ordering::Relaxed);
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = shapes.get_mut(&key) {
            s.used = step;
            s.inputs.shallow_clone().copy_(&host);
            s.graph.replay()?;
            return Ok(Some(s.logits.copy()));
        }
        if shapes.len() >= MAX_GRAPHS {
            let oldest = shapes.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k);
            shapes.remove(&oldest.expect("full, so not empty"));
        }
        let inputs = host.to_device(Device::Cuda(self.ordinal));
        // Eagerly once (the answer of this step), then captured for the next ones. The capture
        // gets views of its own: anything the step derives and keeps on its addressing (the
        // gathered path's mask) must be made inside the graph, not read from the eager run.
        let logits = {
            let (ids, batch) = Self::views(&inputs, plan, rows, width);
            body(&ids, &batch)
        };
        let share = shapes.values().next().map(|s| &s.graph);
        let captured = CudaGraph::capture(self.ordinal, share, || {
            let (ids, batch) = Self::views(&inputs, plan, rows, width);
            body(&ids, &batch)
        });
        match captured {
            Ok((graph, out)) => {
                tracing::debug!(rows, width, "decode step captured");
                shapes.insert(key, Shape { graph, _pool: plan.pool.clone(), inputs, logits: out, used: step });
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "capturing the decode step failed; decoding without CUDA graphs");
                self.off.store(true, Ordering::Relaxed);
            }
        }
        Ok(Some(logits))
    }

    /// The step's inputs in the buffer's layout, on the host.
    fn host_inputs(tokens: &[i64], plan: &PagedPlan, width: usize) -> Tensor {
        let seg = padded(plan.rows());
        let mut v = vec![0i64; 5 * seg + plan.rows() * width];
        for (i, part) in [tokens, &plan.positions(), &plan.block, &plan.offset, &plan.lens].into_iter().enumerate() {
            v[i * seg..i * seg + part.len()].copy_from_slice(part);
        }
        v[5 * seg..].copy_from_slice(&plan.flat_tables(width));
        Tensor::from_slice(&v)
    }

    /// Views of the buffer as the step's ids `[rows, 1]` and addressing.
    fn views(inputs: &Tensor, plan: &PagedPlan, rows: usize, width: usize) -> (Tensor, PagedBatch) {
        let (seg, r) = (padded(rows) as i64, rows as i64);
        let part = |i: i64| inputs.narrow(0, i * seg, r);
        let table = inputs.narrow(0, 5 * seg, r * width as i64).view([r, width as i64]);
        debug_assert_eq!(inputs.kind(), Kind::Int64);
        let batch = PagedBatch::from_device(plan.pool.clone(), part(2), part(3), table, part(4), part(1));
        (part(0).view([r, 1]), batch)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fastvideo_pipeline::token::{KvBlockPool, KvShape, KvStore, PagedKv};

    use super::*;

    /// The graph's input buffer, read through its views, addresses the same pages as the
    /// eager upload of the plan (the layout is all that differs).
    #[test]
    fn the_static_buffer_holds_what_the_eager_step_uploads() {
        let shape = KvShape { layers: 1, kv_heads: 1, head_dim: 8 };
        let pool = Arc::new(KvBlockPool::new(shape, 4, 32, Device::Cpu, Kind::Float));
        let mut caches: Vec<PagedKv> = [3i64, 9, 1].iter().map(|_| PagedKv::new(pool.clone())).collect();
        for (c, n) in caches.iter_mut().zip([3i64, 9, 1]) {
            let kv = Tensor::zeros([1, 1, n, 8], (Kind::Float, Device::Cpu));
            let _ = c.append(0, &kv, &kv).unwrap();
            c.advance(n);
        }
        let mut stores: Vec<&mut dyn KvStore> = caches.iter_mut().map(|c| c as &mut dyn KvStore).collect();
        let plan = PagedPlan::new(&mut stores).unwrap().unwrap();
        let tokens = [11i64, 22, 33];
        let width = plan.max_blocks().next_power_of_two().max(4);
        let buffer = DecodeGraphs::host_inputs(&tokens, &plan, width);
        let (ids, batch) = DecodeGraphs::views(&buffer, &plan, 3, width);
        let eager = PagedBatch::upload(plan.clone());
        let list = |t: &Tensor| Vec::<i64>::try_from(t.reshape([-1])).unwrap();
        assert_eq!(list(&ids), tokens);
        assert_eq!(list(batch.positions()), list(eager.positions()));
        assert_eq!(list(batch.tables().1), list(eager.tables().1), "lengths");
        let (wide, narrow) = (batch.tables().0, eager.tables().0);
        assert_eq!(wide.size(), [3, width as i64]);
        assert_eq!(list(&wide.narrow(1, 0, narrow.size()[1])), list(narrow), "tables, padded on the right");
        // Where the new keys go: each row's position in its own block.
        let k = Tensor::ones([3, 1, 1, 8], (Kind::Float, Device::Cpu))
            * Tensor::from_slice(&[1f32, 2., 3.]).view([3, 1, 1, 1]);
        batch.write(0, &k, &k);
        let written = pool.layer(0).0.sum_dim_intlist([1i64, 3].as_slice(), false, Kind::Float);
        for (row, len) in [3i64, 9, 1].into_iter().enumerate() {
            let block = plan.tables[row][(len / 4) as usize];
            let got = written.double_value(&[block, len % 4]);
            assert_eq!(got, 8.0 * (row + 1) as f64, "row {row}'s new keys at its position");
        }
    }
}
