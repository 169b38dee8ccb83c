//! Ulysses sequence parallelism: the exchanges around the transformer's self-attention when a
//! step is split over the ranks of a group.
//!
//! Every rank holds a contiguous slice of the token sequence for everything but attention
//! (norms, modulation, feed-forward, cross-attention and the output head are per token). Around
//! self-attention one all-to-all turns "my tokens, all heads" into "all tokens, my heads" (q, k
//! and v in one exchange), each rank attends over the whole sequence with its heads, and a
//! second all-to-all turns the output back. Heads must divide evenly; tokens need not (the first
//! `N mod d` ranks hold one more), so any grid works at any degree that divides the heads.

use std::sync::Arc;

use anyhow::{bail, Result};
use fastvideo_parallel::Communicator;
use tch::Tensor;

/// Tokens of each rank when `degree` ranks split `tokens`: contiguous, sizes differing by at
/// most one (the first `tokens mod degree` ranks take the extra ones).
pub fn split_counts(tokens: i64, degree: i64) -> Vec<i64> {
    (0..degree).map(|r| tokens / degree + i64::from(r < tokens % degree)).collect()
}

/// Checks that `degree` ranks can split `heads` attention heads evenly and that each gets a
/// token; the error names what does not fit.
pub fn check_degree(degree: i64, heads: i64, tokens: i64) -> Result<()> {
    if degree < 1 {
        bail!("sequence parallel degree {degree} must be at least 1");
    }
    if heads % degree != 0 {
        bail!("sequence parallel degree {degree} does not divide the model's {heads} attention heads");
    }
    if tokens < degree {
        bail!("sequence parallel degree {degree} exceeds the request's {tokens} tokens");
    }
    Ok(())
}

/// One rank's slice of a sequence split over its group.
pub struct SequenceShard {
    comm: Arc<dyn Communicator>,
    counts: Vec<i64>,
    heads: i64,
}

impl SequenceShard {
    /// The slice rank `comm.rank()` holds of `tokens` tokens, for a model with `heads` heads.
    pub fn new(comm: Arc<dyn Communicator>, tokens: i64, heads: i64) -> Result<Self> {
        let degree = comm.size() as i64;
        check_degree(degree, heads, tokens)?;
        Ok(Self { counts: split_counts(tokens, degree), comm, heads })
    }

    /// This rank's index in the group.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// First token of this rank's slice.
    pub fn start(&self) -> i64 {
        self.counts[..self.rank()].iter().sum()
    }

    /// Tokens in this rank's slice.
    pub fn len(&self) -> i64 {
        self.counts[self.rank()]
    }

    /// Whether this rank holds no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Self-attention of this rank's `[B, n, H·D]` queries, keys and values (q and k normalised and
/// rotated) over the whole sequence, the Ulysses way. Returns `[B, H, n, D]` (what
/// [`merge_heads`](crate::heads::merge_heads) takes).
pub fn ulysses_attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: i64, shard: &SequenceShard) -> Result<Tensor> {
    anyhow::ensure!(heads == shard.heads, "attention with {heads} heads on a shard made for {}", shard.heads);
    let (b, n, hd_all) = q.size3()?;
    let degree = shard.counts.len() as i64;
    let (group, hd) = (heads / degree, hd_all / heads);
    let [q, k, v] = [q, k, v].map(|t| t.view([b, n, heads, hd]));
    // Head group j of my tokens goes to rank j; rank i's tokens of my head group come back.
    let send: Vec<Tensor> = (0..degree)
        .map(|j| {
            let part = |t: &Tensor| t.narrow(2, j * group, group);
            Tensor::stack(&[part(&q), part(&k), part(&v)], 0)
        })
        .collect();
    let shapes: Vec<Vec<i64>> = shard.counts.iter().map(|&c| vec![3, b, c, group, hd]).collect();
    let recv = shard.comm.all_to_all(&send, &shapes)?;
    drop(send);
    // q, k and v each joined into its own tensor `[B, N, group, D]`, seen as `[B, group, N, D]`:
    // the layout `split_heads` gives the one-device attention, so SDPA picks the same backend.
    let t = |i: i64| Tensor::cat(&recv.iter().map(|r| r.get(i)).collect::<Vec<_>>(), 1).transpose(1, 2);
    let o = Tensor::scaled_dot_product_attention(&t(0), &t(1), &t(2), None::<Tensor>, 0.0, false, None, false);
    drop(recv);
    // My head group of rank j's tokens goes back to rank j; every head group of mine comes back.
    let mut start = 0;
    let send: Vec<Tensor> = shard
        .counts
        .iter()
        .map(|&c| {
            let piece = o.narrow(2, start, c).contiguous();
            start += c;
            piece
        })
        .collect();
    let shapes: Vec<Vec<i64>> = shard.counts.iter().map(|_| vec![b, group, n, hd]).collect();
    Ok(Tensor::cat(&shard.comm.all_to_all(&send, &shapes)?, 1))
}
