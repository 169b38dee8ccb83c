//! Attention heads in and out of the `[B, N, H*D]` activations linears produce, in the layout
//! SDPA takes.

use tch::Tensor;

/// `[B, N, H*D] -> [B, H, N, D]`.
pub fn split_heads(x: &Tensor, heads: i64) -> Tensor {
    let (b, n, _) = x.size3().expect("rank-3 activations");
    x.view([b, n, heads, -1]).transpose(1, 2)
}

/// `[B, H, N, D] -> [B, N, H*D]`.
pub fn merge_heads(x: &Tensor) -> Tensor {
    let (b, _, n, _) = x.size4().expect("rank-4 activations");
    x.transpose(1, 2).contiguous().view([b, n, -1])
}
