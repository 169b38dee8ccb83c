//! Key/value storage for decoder language models, per request: contiguous ([`ContiguousKv`], the
//! reference) or paged ([`PagedKv`]: fixed-size blocks from a shared [`KvBlockPool`] under a
//! memory budget, a block table per request, blocks back to the pool when the request ends).
//! Models see both through [`KvStore`]; the tests hold them to identical tokens.

use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use tch::{Device, Kind, Tensor};

/// What a decoder layer needs of its request's cache.
pub trait KvStore: Send {
    /// Positions held (the next token's position).
    fn len(&self) -> i64;
    /// Whether nothing is held yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `k, v` (`[1, kv_heads, T, D]`) of the current step to layer `layer`, returning
    /// every position's keys and values so far, `[1, kv_heads, len + T, D]`.
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)>;
    /// Called once per forward, after every layer appended `t` positions.
    fn advance(&mut self, t: i64);
    /// The paged cache behind this store, so decode steps over one pool batch their attention
    /// ([`super::PagedBatch`]); `None` for other stores.
    fn as_paged(&mut self) -> Option<&mut PagedKv> {
        None
    }
}

/// One growing tensor pair per layer.
#[derive(Default)]
pub struct ContiguousKv {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: i64,
}

impl ContiguousKv {
    /// An empty cache for a model of `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self { layers: (0..layers).map(|_| None).collect(), len: 0 }
    }
}

impl KvStore for ContiguousKv {
    fn len(&self) -> i64 {
        self.len
    }

    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let slot = &mut self.layers[layer];
        let (k, v) = match slot.take() {
            Some((pk, pv)) => (Tensor::cat(&[&pk, k], 2), Tensor::cat(&[&pv, v], 2)),
            None => (k.shallow_clone(), v.shallow_clone()),
        };
        *slot = Some((k.shallow_clone(), v.shallow_clone()));
        Ok((k, v))
    }

    fn advance(&mut self, t: i64) {
        self.len += t;
    }
}

/// The shape of one model's cache.
#[derive(Clone, Copy, Debug)]
pub struct KvShape {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads per layer.
    pub kv_heads: i64,
    /// Channels per head.
    pub head_dim: i64,
}

/// Fixed-size key/value blocks for every layer on one device, shared by the requests of a model:
/// per layer `[blocks, kv_heads, block_size, head_dim]` for keys and for values.
pub struct KvBlockPool {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    block_size: i64,
    free: Mutex<Vec<u32>>,
    blocks: usize,
    /// Told the free count after every change (metrics).
    observer: std::sync::OnceLock<Box<dyn Fn(usize) + Send + Sync>>,
}

// SAFETY: requests write only the blocks their table holds (the allocator hands each block to one
// request at a time) and read only their own; the tensors themselves are never resized.
unsafe impl Sync for KvBlockPool {}
unsafe impl Send for KvBlockPool {}

impl KvBlockPool {
    /// As many blocks of `block_size` positions as `budget_bytes` holds (at least one).
    pub fn with_budget(shape: KvShape, block_size: i64, budget_bytes: u64, device: Device, kind: Kind) -> Self {
        let per_block = 2
            * shape.layers as u64
            * (shape.kv_heads * block_size * shape.head_dim) as u64
            * kind.elt_size_in_bytes() as u64;
        let blocks = (budget_bytes / per_block.max(1)).max(1) as usize;
        Self::new(shape, block_size, blocks, device, kind)
    }

    /// A pool of `blocks` blocks of `block_size` positions.
    pub fn new(shape: KvShape, block_size: i64, blocks: usize, device: Device, kind: Kind) -> Self {
        let dims = [blocks as i64, shape.kv_heads, block_size, shape.head_dim];
        let alloc = || (0..shape.layers).map(|_| Tensor::zeros(dims, (kind, device))).collect::<Vec<_>>();
        let free = Mutex::new((0..blocks as u32).rev().collect());
        Self { k: alloc(), v: alloc(), block_size, free, blocks, observer: Default::default() }
    }

    /// Calls `f` with the free block count now and after every change (one observer).
    pub fn observe(&self, f: Box<dyn Fn(usize) + Send + Sync>) {
        f(self.free_blocks());
        let _ = self.observer.set(f);
    }

    fn notify(&self, free: usize) {
        if let Some(f) = self.observer.get() {
            f(free);
        }
    }

    /// Layer `layer`'s key and value blocks, `[blocks, kv_heads, block_size, head_dim]` each.
    pub fn layer(&self, layer: usize) -> (&Tensor, &Tensor) {
        (&self.k[layer], &self.v[layer])
    }

    /// Positions per block.
    pub fn block_size(&self) -> i64 {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn blocks(&self) -> usize {
        self.blocks
    }
    /// Blocks free now.
    pub fn free_blocks(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `n` blocks, or none if fewer are free (all or nothing).
    fn take(&self, n: usize) -> Option<Vec<u32>> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let have = free.len();
        let taken = (have >= n).then(|| free.split_off(have - n));
        let left = free.len();
        drop(free);
        self.notify(left);
        taken
    }

    fn give_back(&self, blocks: &mut Vec<u32>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.append(blocks);
        let left = free.len();
        drop(free);
        self.notify(left);
    }
}

/// A request's paged cache: its block table into a [`KvBlockPool`]. The blocks return to the pool
/// when it is dropped (the request finished, failed or was cancelled).
pub struct PagedKv {
    pool: Arc<KvBlockPool>,
    table: Vec<u32>,
    len: i64,
}

impl PagedKv {
    /// An empty cache drawing blocks from `pool`.
    pub fn new(pool: Arc<KvBlockPool>) -> Self {
        Self { pool, table: Vec::new(), len: 0 }
    }

    /// Blocks this request holds.
    pub fn blocks(&self) -> usize {
        self.table.len()
    }

    /// The pool its blocks come from.
    pub fn pool(&self) -> &Arc<KvBlockPool> {
        &self.pool
    }

    /// Its block table: the pool block of positions `i * block_size..`.
    pub fn table(&self) -> &[u32] {
        &self.table
    }

    /// Makes room for `positions` in all.
    pub fn reserve(&mut self, positions: i64) -> Result<()> {
        let need = (positions + self.pool.block_size - 1) / self.pool.block_size;
        let more = (need as usize).saturating_sub(self.table.len());
        if more > 0 {
            match self.pool.take(more) {
                Some(b) => self.table.extend(b),
                None => bail!(
                    "key/value cache exhausted: {more} more blocks needed, {} of {} free",
                    self.pool.free_blocks(),
                    self.pool.blocks()
                ),
            }
        }
        Ok(())
    }

    /// This request's positions `0..n` of one pool tensor, `[1, kv_heads, n, D]`.
    fn gather(&self, pool: &Tensor, n: i64) -> Tensor {
        let used = (n + self.pool.block_size - 1) / self.pool.block_size;
        let ids: Vec<i64> = self.table[..used as usize].iter().map(|&b| b as i64).collect();
        let idx = Tensor::from_slice(&ids).to_device(pool.device());
        let blocks = pool.index_select(0, &idx); // [used, H, bs, D]
        let (h, d) = (blocks.size()[1], blocks.size()[3]);
        blocks.permute([1, 0, 2, 3]).reshape([1, h, used * self.pool.block_size, d]).narrow(2, 0, n)
    }
}

impl KvStore for PagedKv {
    fn len(&self) -> i64 {
        self.len
    }

    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.size()[2];
        self.reserve(self.len + t)?;
        let bs = self.pool.block_size;
        for (src, pool) in [(k, &self.pool.k[layer]), (v, &self.pool.v[layer])] {
            let mut written = 0;
            while written < t {
                let pos = self.len + written;
                let (block, off) = (self.table[(pos / bs) as usize] as i64, pos % bs);
                let n = (bs - off).min(t - written);
                let mut dst = pool.select(0, block).narrow(1, off, n);
                dst.copy_(&src.select(0, 0).narrow(1, written, n));
                written += n;
            }
        }
        let total = self.len + t;
        Ok((self.gather(&self.pool.k[layer], total), self.gather(&self.pool.v[layer], total)))
    }

    fn advance(&mut self, t: i64) {
        self.len += t;
    }

    fn as_paged(&mut self) -> Option<&mut PagedKv> {
        Some(self)
    }
}

impl Drop for PagedKv {
    fn drop(&mut self) {
        self.pool.give_back(&mut self.table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> KvShape {
        KvShape { layers: 2, kv_heads: 2, head_dim: 4 }
    }

    #[test]
    fn paged_reads_back_what_contiguous_holds_across_block_edges() {
        let pool = Arc::new(KvBlockPool::new(shape(), 3, 8, Device::Cpu, Kind::Float));
        let (mut paged, mut flat) = (PagedKv::new(pool.clone()), ContiguousKv::new(2));
        for t in [5i64, 1, 1, 4] {
            for layer in 0..2 {
                let k = Tensor::randn([1, 2, t, 4], (Kind::Float, Device::Cpu));
                let v = Tensor::randn([1, 2, t, 4], (Kind::Float, Device::Cpu));
                let (pk, pv) = paged.append(layer, &k, &v).unwrap();
                let (fk, fv) = flat.append(layer, &k, &v).unwrap();
                assert!(pk.equal(&fk) && pv.equal(&fv));
            }
            paged.advance(t);
            flat.advance(t);
        }
        assert_eq!((paged.len(), paged.blocks(), pool.free_blocks()), (11, 4, 4));
        drop(paged);
        assert_eq!(pool.free_blocks(), 8, "blocks return when the request ends");
    }

    #[test]
    fn exhaustion_is_an_error_and_takes_nothing() {
        let pool = Arc::new(KvBlockPool::new(shape(), 4, 2, Device::Cpu, Kind::Float));
        let mut a = PagedKv::new(pool.clone());
        let k = Tensor::zeros([1, 2, 12, 4], (Kind::Float, Device::Cpu));
        let e = a.append(0, &k, &k).unwrap_err().to_string();
        assert!(e.contains("exhausted") && e.contains("3 more blocks"), "{e}");
        assert_eq!(pool.free_blocks(), 2);
        let budget = KvBlockPool::with_budget(shape(), 16, 2 * 2 * 2 * 16 * 4 * 4 * 10, Device::Cpu, Kind::Float);
        assert_eq!(budget.blocks(), 10);
    }
}
