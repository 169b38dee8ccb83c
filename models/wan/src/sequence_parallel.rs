//! Ulysses sequence parallelism (issue 18, groundwork): the sharding and reassembly around the
//! transformer's self-attention when a step is split over `degree` ranks.
//!
//! Every rank holds a contiguous slice of the token sequence for everything but attention
//! (norms, modulation, feed-forward and cross-attention are per token). Around self-attention an
//! all-to-all turns "my tokens, all heads" into "all tokens, my heads", each rank attends over
//! the whole sequence for its heads, and a second all-to-all turns it back. These functions are
//! the exchanges as pure functions over every rank's tensors — what NCCL's all-to-all computes —
//! so the layout logic is tested on the CPU against the unsharded attention; a multi-GPU backend
//! runs the same per-rank slicing with the collective in the middle.

use anyhow::{bail, Result};
use tch::Tensor;

/// Checks that `degree` ranks can split `heads` attention heads and `tokens` tokens evenly; the
/// error says which does not divide (`--gpus` and `--parallel sp` report it as is).
pub fn check_degree(degree: i64, heads: i64, tokens: i64) -> Result<()> {
    if degree < 1 {
        bail!("sequence parallel degree {degree} must be at least 1");
    }
    if heads % degree != 0 {
        bail!("sequence parallel degree {degree} does not divide the model's {heads} attention heads");
    }
    if tokens % degree != 0 {
        bail!("sequence parallel degree {degree} does not divide the request's {tokens} tokens");
    }
    Ok(())
}

/// Rank `r`'s slice of the sequence (dim 1 of `[B, N, …]`), for every rank.
pub fn shard_sequence(x: &Tensor, degree: i64) -> Vec<Tensor> {
    x.chunk(degree, 1)
}

/// The sequence back from every rank's slice.
pub fn gather_sequence(shards: &[Tensor]) -> Tensor {
    Tensor::cat(shards, 1)
}

/// An all-to-all over every rank's tensor: rank `r` splits its tensor into `d` pieces along
/// `split` and sends piece `j` to rank `j`; each rank concatenates what it receives, in rank
/// order, along `join`.
fn all_to_all(shards: &[Tensor], split: i64, join: i64) -> Vec<Tensor> {
    let d = shards.len();
    let pieces: Vec<Vec<Tensor>> = shards.iter().map(|s| s.chunk(d as i64, split)).collect();
    (0..d).map(|r| Tensor::cat(&pieces.iter().map(|p| p[r].shallow_clone()).collect::<Vec<_>>(), join)).collect()
}

/// First all-to-all: each rank's `[B, N/d, H, D]` (its tokens, all heads) to `[B, N, H/d, D]`
/// (all tokens, its heads). Rank `r` receives head group `r` from every rank, in rank order.
pub fn sequence_to_heads(shards: &[Tensor]) -> Vec<Tensor> {
    all_to_all(shards, 2, 1)
}

/// Second all-to-all, the inverse: each rank's `[B, N, H/d, D]` back to `[B, N/d, H, D]`.
pub fn heads_to_sequence(shards: &[Tensor]) -> Vec<Tensor> {
    all_to_all(shards, 1, 2)
}

/// Attention of `[B, N, H, D]` queries over keys and values of the same layout.
fn attend(q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    // SDPA wants [B, H, N, D].
    let t = |x: &Tensor| x.transpose(1, 2);
    Tensor::scaled_dot_product_attention(&t(q), &t(k), &t(v), None::<Tensor>, 0.0, false, None, false).transpose(1, 2)
}

/// Self-attention of `[B, N, H, D]` queries, keys and values held sequence-sharded by `degree`
/// ranks (given as every rank's slices), the Ulysses way: all-to-all to heads, attention per
/// rank over the whole sequence, all-to-all back. Returns every rank's `[B, N/d, H, D]` output.
pub fn ulysses_attention(q: &[Tensor], k: &[Tensor], v: &[Tensor]) -> Vec<Tensor> {
    let (q, k, v) = (sequence_to_heads(q), sequence_to_heads(k), sequence_to_heads(v));
    let out: Vec<Tensor> = q.iter().zip(&k).zip(&v).map(|((q, k), v)| attend(q, k, v)).collect();
    heads_to_sequence(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn randn(shape: &[i64]) -> Tensor {
        Tensor::randn(shape, (Kind::Float, Device::Cpu))
    }

    #[test]
    fn the_exchanges_are_inverse_and_move_the_right_slices() {
        tch::manual_seed(1);
        let x = randn(&[1, 12, 4, 3]);
        let shards = shard_sequence(&x, 2);
        let heads = sequence_to_heads(&shards);
        // Rank 1 holds every token of heads 2..4.
        assert_eq!(heads[1].size(), [1, 12, 2, 3]);
        assert!(heads[1].equal(&x.narrow(2, 2, 2)));
        let back = heads_to_sequence(&heads);
        assert!(gather_sequence(&back).equal(&x), "the round trip is exact");
    }

    #[test]
    fn sharded_attention_equals_the_unsharded_forward() {
        // Wan-like: 12 heads of 16, a sequence that degrees 2, 3, 4 and 6 divide.
        tch::manual_seed(2);
        let (q, k, v) = (randn(&[1, 48, 12, 16]), randn(&[1, 48, 12, 16]), randn(&[1, 48, 12, 16]));
        let want = attend(&q, &k, &v);
        for degree in [1, 2, 3, 4, 6] {
            check_degree(degree, 12, 48).unwrap();
            let out = ulysses_attention(
                &shard_sequence(&q, degree),
                &shard_sequence(&k, degree),
                &shard_sequence(&v, degree),
            );
            assert_eq!(out.len(), degree as usize);
            let got = gather_sequence(&out);
            let err = (&got - &want).abs().max().double_value(&[]);
            // Each rank runs the same attention over the same rows: fp32 rounding only.
            assert!(err < 1e-6, "degree {degree}: max |sharded - unsharded| = {err}");
        }
    }

    #[test]
    fn degrees_that_do_not_divide_are_refused_naming_what() {
        let e = check_degree(5, 12, 40).unwrap_err().to_string();
        assert!(e.contains("12 attention heads"), "{e}");
        let e = check_degree(4, 12, 42).unwrap_err().to_string();
        assert!(e.contains("42 tokens"), "{e}");
        assert!(check_degree(0, 12, 48).is_err());
    }
}
