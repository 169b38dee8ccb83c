//! One decode step of many requests whose caches share a [`KvBlockPool`]: where each request's
//! new position goes, and attention over every request's pages as one operation per layer —
//! not one per request, which is what made large decode batches slow (each row its own SDPA,
//! gather and copies).

use std::sync::Arc;

use anyhow::Result;
use tch::{Kind, Tensor};

use super::kv::{KvBlockPool, KvStore};

/// The addressing of one decode step over `B` paged caches on one pool, built once per step and
/// used by every layer.
pub struct PagedBatch {
    pool: Arc<KvBlockPool>,
    /// `[B]` int64: the pool block and the offset in it of each request's new position.
    block: Tensor,
    offset: Tensor,
    /// `[B, max_blocks]` int64: each request's block table, padded with block 0 (masked).
    table: Tensor,
    /// `[B]` int64: positions each request attends to, the new one included.
    lens: Tensor,
    /// `[B, 1, 1, max_blocks * block_size]` bool: which gathered positions are real (made when
    /// first needed, for the gathered fallback).
    mask: std::sync::OnceLock<Tensor>,
    /// `[B]` int64 positions of the new tokens (for rotary tables).
    positions: Tensor,
}

/// A decode step's addressing on the host: where each request's new position goes and which
/// blocks it reads. [`PagedBatch::new`] uploads it; a CUDA-graph runner copies it into the
/// static buffers its graph reads instead.
#[derive(Clone)]
pub struct PagedPlan {
    /// The pool every row's pages are in.
    pub pool: Arc<KvBlockPool>,
    /// Per request: the pool block of its new position.
    pub block: Vec<i64>,
    /// Per request: the offset of its new position in that block.
    pub offset: Vec<i64>,
    /// Per request: positions it attends to, the new one included.
    pub lens: Vec<i64>,
    /// Per request: its block table.
    pub tables: Vec<Vec<i64>>,
}

impl PagedPlan {
    /// The step's addressing when every cache is paged on one pool (else `None`: the caller
    /// runs its rows another way); reserves each request's new position (an exhausted pool is
    /// an error).
    pub fn new(caches: &mut [&mut dyn KvStore]) -> Result<Option<Self>> {
        let mut pool: Option<Arc<KvBlockPool>> = None;
        for c in caches.iter_mut() {
            let Some(p) = c.as_paged() else { return Ok(None) };
            match &pool {
                Some(q) if !Arc::ptr_eq(q, p.pool()) => return Ok(None),
                Some(_) => {}
                None => pool = Some(p.pool().clone()),
            }
        }
        let Some(pool) = pool else { return Ok(None) };
        let bs = pool.block_size();
        let (mut block, mut offset, mut lens, mut tables) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for c in caches.iter_mut() {
            let len = c.len();
            let p = c.as_paged().expect("checked above");
            p.reserve(len + 1)?;
            block.push(p.table()[(len / bs) as usize] as i64);
            offset.push(len % bs);
            lens.push(len + 1);
            tables.push(p.table().iter().map(|&b| b as i64).collect::<Vec<_>>());
        }
        Ok(Some(Self { pool, block, offset, lens, tables }))
    }

    /// Rows in the step.
    pub fn rows(&self) -> usize {
        self.lens.len()
    }

    /// The longest block table.
    pub fn max_blocks(&self) -> usize {
        self.tables.iter().map(Vec::len).max().unwrap_or(1)
    }

    /// The tables as one `[B, width]` row-major list, padded with block 0 (never read: each
    /// row reads its first `lens` positions only).
    pub fn flat_tables(&self, width: usize) -> Vec<i64> {
        self.tables.iter().flat_map(|t| t.iter().copied().chain(std::iter::repeat(0)).take(width)).collect()
    }

    /// Positions of the new tokens.
    pub fn positions(&self) -> Vec<i64> {
        self.lens.iter().map(|l| l - 1).collect()
    }
}

impl PagedBatch {
    /// [`PagedPlan::new`], uploaded.
    pub fn new(caches: &mut [&mut dyn KvStore]) -> Result<Option<Self>> {
        Ok(PagedPlan::new(caches)?.map(Self::upload))
    }

    /// The plan's tensors on the pool's device.
    pub fn upload(plan: PagedPlan) -> Self {
        let b = plan.rows() as i64;
        let max_blocks = plan.max_blocks();
        let device = plan.pool.layer(0).0.device();
        let on = |v: &[i64]| Tensor::from_slice(v).to_device(device);
        Self::from_device(
            plan.pool.clone(),
            on(&plan.block),
            on(&plan.offset),
            on(&plan.flat_tables(max_blocks)).view([b, max_blocks as i64]),
            on(&plan.lens),
            on(&plan.positions()),
        )
    }

    /// The addressing from tensors on the pool's device (`[B]` int64 each, `table [B, width]`):
    /// what a CUDA graph captures, so that each replay reads them where they are.
    pub fn from_device(
        pool: Arc<KvBlockPool>,
        block: Tensor,
        offset: Tensor,
        table: Tensor,
        lens: Tensor,
        positions: Tensor,
    ) -> Self {
        Self { pool, block, offset, table, lens, mask: std::sync::OnceLock::new(), positions }
    }

    /// `[B]` int64 positions of the new tokens.
    pub fn positions(&self) -> &Tensor {
        &self.positions
    }

    /// `[B, max_blocks]` block tables and `[B]` lengths (new position included), int64, for a
    /// paged attention kernel.
    pub fn tables(&self) -> (&Tensor, &Tensor) {
        (&self.table, &self.lens)
    }

    /// The pool every row's pages are in.
    pub fn pool(&self) -> &KvBlockPool {
        &self.pool
    }

    /// Stores the new position's keys and values of layer `layer` (`[B, kv_heads, 1, D]`).
    pub fn write(&self, layer: usize, k: &Tensor, v: &Tensor) {
        let (pk, pv) = self.pool.layer(layer);
        let at = [Some(self.block.shallow_clone()), None, Some(self.offset.shallow_clone())];
        // pool[block[i], :, offset[i], :] = k[i]: advanced indices around a slice put the batch
        // dimension first, so the values are `[B, kv_heads, D]`.
        let _ = pk.shallow_clone().index_put_(&at, &k.squeeze_dim(2).to_kind(pk.kind()), false);
        let _ = pv.shallow_clone().index_put_(&at, &v.squeeze_dim(2).to_kind(pv.kind()), false);
    }

    /// Attention of `q` (`[B, heads, 1, D]`) over each request's positions of layer `layer`,
    /// `[B, heads, 1, D]`: the pages gathered into one padded batch and one masked SDPA (grouped
    /// query heads read their shared key/value head).
    pub fn attend_gathered(&self, layer: usize, q: &Tensor) -> Tensor {
        let (pk, pv) = self.pool.layer(layer);
        let (b, max_blocks) = self.table.size2().expect("[B, max_blocks]");
        let gather = |pool: &Tensor| {
            let s = pool.size();
            let (kvh, bs, d) = (s[1], s[2], s[3]);
            pool.index_select(0, &self.table.view([-1]))
                .view([b, max_blocks, kvh, bs, d])
                .permute([0, 2, 1, 3, 4])
                .reshape([b, kvh, max_blocks * bs, d])
        };
        let (k, v) = (gather(pk), gather(pv));
        let gqa = q.size()[1] != k.size()[1];
        let mask = self.mask.get_or_init(|| {
            let bs = self.pool.block_size();
            let span = Tensor::arange(max_blocks * bs, (Kind::Int64, q.device()));
            span.unsqueeze(0).lt_tensor(&self.lens.unsqueeze(1)).view([b, 1, 1, max_blocks * bs])
        });
        Tensor::scaled_dot_product_attention(q, &k, &v, Some(mask), 0.0, false, None, gqa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::kv::{ContiguousKv, KvShape, PagedKv};
    use tch::Device;

    #[test]
    fn batched_paged_attention_equals_each_rows_own() {
        let shape = KvShape { layers: 1, kv_heads: 2, head_dim: 8 };
        let pool = Arc::new(KvBlockPool::new(shape, 4, 16, Device::Cpu, Kind::Float));
        let lens = [3i64, 9, 1];
        let mut paged: Vec<PagedKv> = lens.iter().map(|_| PagedKv::new(pool.clone())).collect();
        let mut flat: Vec<ContiguousKv> = lens.iter().map(|_| ContiguousKv::new(1)).collect();
        for ((p, f), &n) in paged.iter_mut().zip(&mut flat).zip(&lens) {
            let k = Tensor::randn([1, 2, n, 8], (Kind::Float, Device::Cpu));
            let v = Tensor::randn([1, 2, n, 8], (Kind::Float, Device::Cpu));
            let _ = p.append(0, &k, &v).unwrap();
            let _ = f.append(0, &k, &v).unwrap();
            p.advance(n);
            f.advance(n);
        }
        let mut caches: Vec<&mut dyn KvStore> = paged.iter_mut().map(|p| p as &mut dyn KvStore).collect();
        let batch = PagedBatch::new(&mut caches).unwrap().expect("one pool");
        assert_eq!(Vec::<i64>::try_from(batch.positions()).unwrap(), lens);
        let (k, v) = (
            Tensor::randn([3, 2, 1, 8], (Kind::Float, Device::Cpu)),
            Tensor::randn([3, 2, 1, 8], (Kind::Float, Device::Cpu)),
        );
        let q = Tensor::randn([3, 4, 1, 8], (Kind::Float, Device::Cpu));
        batch.write(0, &k, &v);
        let got = batch.attend_gathered(0, &q);
        for (i, f) in flat.iter_mut().enumerate() {
            let r = i as i64;
            let (fk, fv) = f.append(0, &k.narrow(0, r, 1), &v.narrow(0, r, 1)).unwrap();
            let (fk, fv) = (fk.repeat_interleave_self_int(2, 1, None), fv.repeat_interleave_self_int(2, 1, None));
            let want = Tensor::scaled_dot_product_attention(
                &q.narrow(0, r, 1),
                &fk,
                &fv,
                None::<Tensor>,
                0.0,
                false,
                None,
                false,
            );
            let diff = (got.narrow(0, r, 1) - want).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "row {i}: {diff}");
        }
        // A cache outside the pool: the caller batches another way.
        let mut other = ContiguousKv::new(1);
        let mut mixed: Vec<&mut dyn KvStore> = vec![&mut paged[0], &mut other];
        assert!(PagedBatch::new(&mut mixed).unwrap().is_none());
    }
}
