//! Text and image tokens of several samples packed into one sequence by token count: every
//! sample's text and image tokens laid end to end (no padding to the longest), projections
//! and feed-forwards run once over all of them, attention runs per sample over its own
//! `[text | image]` span, and each token is modulated by its own sample's timestep. A
//! classifier-free guidance pair is two samples; so is a batch of requests of different sizes.
//! What joint-attention (MMDiT) families share: FLUX.2, Qwen-Image.

mod attention;
mod lora;

pub use attention::{attend, norm_rope, HeadNorm, RopeTables, Stream};
pub use lora::{linear, with_rows, PackedLora};

use fastvideo_kernels::LayerNormSpec;
use tch::{Kind, Tensor};

/// One shift/scale/gate triple, each `[B or 1, 1 or S, dim]`.
pub struct Mod {
    /// Added after the scale.
    pub shift: Tensor,
    /// `x · (1 + scale)`.
    pub scale: Tensor,
    /// The residual branch's weight.
    pub gate: Tensor,
}

/// A per-sample vector `[B, 1, D]` as the fused norm kernels take it (float32); `None` for a
/// per-token one `[1, S, D]` (a pack of samples at different times), which the ops path takes.
fn per_sample(t: &Tensor) -> Option<Tensor> {
    (t.size()[1] == 1).then(|| t.to_kind(Kind::Float))
}

impl Mod {
    /// `layer_norm(x) · (1 + scale) + shift` (the norm without affine weights): one fused
    /// kernel on the GPU, the norm in float32.
    pub fn modulate(&self, x: &Tensor, eps: f64) -> Tensor {
        if let (Some(scale), Some(shift)) = (per_sample(&self.scale), per_sample(&self.shift)) {
            let spec = LayerNormSpec { eps, affine: None, modulation: Some((&scale, &shift)) };
            return fastvideo_kernels::layer_norm_modulate(&x.contiguous(), &spec);
        }
        let d = x.size()[x.dim() - 1];
        let normed = x.layer_norm([d], None::<Tensor>, None::<Tensor>, eps, false);
        normed * (&self.scale + 1.0) + &self.shift
    }

    /// `x + gate · y`: one fused kernel on the GPU.
    pub fn gated(&self, x: &Tensor, y: &Tensor) -> Tensor {
        match per_sample(&self.gate) {
            Some(gate) => fastvideo_kernels::gated_residual(&x.contiguous(), &y.contiguous(), Some(&gate)),
            None => x + &self.gate * y,
        }
    }

    /// `x' = x + gate · y`, then `next`'s modulated norm of `x'`: `(x', norm)`, one fused kernel
    /// on the GPU.
    pub fn gated_then(&self, x: &Tensor, y: &Tensor, next: &Mod, eps: f64) -> (Tensor, Tensor) {
        let fused = (per_sample(&self.gate), per_sample(&next.scale), per_sample(&next.shift));
        if let (Some(gate), Some(scale), Some(shift)) = fused {
            let spec = LayerNormSpec { eps, affine: None, modulation: Some((&scale, &shift)) };
            return fastvideo_kernels::residual_layer_norm_modulate(
                &x.contiguous(),
                &y.contiguous(),
                Some(&gate),
                &spec,
            );
        }
        let x = self.gated(x, y);
        let n = next.modulate(&x, eps);
        (x, n)
    }

    /// The triples of a modulation's output `[B, 3·sets·dim]`, split as diffusers splits it
    /// (`chunk(3·sets)`: shift, scale, gate of each set in turn), each `[B, 1, dim]`.
    pub fn split(m: &Tensor, sets: i64) -> Vec<Mod> {
        let chunks = m.unsqueeze(1).chunk(3 * sets, -1);
        chunks
            .chunks(3)
            .map(|c| Mod { shift: c[0].shallow_clone(), scale: c[1].shallow_clone(), gate: c[2].shallow_clone() })
            .collect()
    }
}

/// Where each sample's tokens sit in the packed streams.
pub struct Layout {
    /// Text tokens per sample.
    pub text: Vec<i64>,
    /// Image tokens per sample.
    pub image: Vec<i64>,
    /// The samples' timesteps are all equal: modulations broadcast instead of being gathered
    /// per token.
    pub one_time: bool,
}

impl Layout {
    /// The layout of samples of `text` and `image` tokens each, at `times`.
    pub fn new(text: Vec<i64>, image: Vec<i64>, times: &[f32]) -> Self {
        let one_time = times.iter().all(|t| *t == times[0]);
        Self { text, image, one_time }
    }

    /// Samples in the pack.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether it packs nothing.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// For each token of a stream of per-sample `lengths`, its sample's index.
    fn owners(lengths: &[i64], device: tch::Device) -> Tensor {
        let owners: Vec<i64> =
            lengths.iter().enumerate().flat_map(|(i, &n)| std::iter::repeat_n(i as i64, n as usize)).collect();
        Tensor::from_slice(&owners).to_device(device)
    }

    /// Per-token rows `[1, ΣS, D]` of a stream of per-sample `lengths` from per-sample rows
    /// `[B, 1, D]` (the first sample's `[1, 1, D]`, broadcast, when every sample has one time).
    pub fn spread(&self, rows: &Tensor, lengths: &[i64]) -> Tensor {
        match self.one_time {
            true => rows.narrow(0, 0, 1),
            false => rows.squeeze_dim(1).index_select(0, &Self::owners(lengths, rows.device())).unsqueeze(0),
        }
    }

    /// [`Self::spread`] of each shift, scale and gate.
    pub fn spread_mods(&self, mods: &[Mod], lengths: &[i64]) -> Vec<Mod> {
        let s = |t: &Tensor| self.spread(t, lengths);
        mods.iter().map(|m| Mod { shift: s(&m.shift), scale: s(&m.scale), gate: s(&m.gate) }).collect()
    }

    /// The joint sequence `[1, Σ(St + Si), C]` of text stream `text [1, ΣSt, C]` and image
    /// stream `image [1, ΣSi, C]`: each sample's text, then its image.
    pub fn interleave(&self, text: &Tensor, image: &Tensor) -> Tensor {
        let (mut ot, mut oi) = (0, 0);
        let mut parts = Vec::with_capacity(2 * self.len());
        for (&t, &i) in self.text.iter().zip(&self.image) {
            parts.push(text.narrow(1, ot, t));
            parts.push(image.narrow(1, oi, i));
            ot += t;
            oi += i;
        }
        Tensor::cat(&parts, 1)
    }

    /// The inverse of [`Self::interleave`]: `(text, image)` streams of a joint sequence (views
    /// for one sample, copies for several).
    pub fn split(&self, joint: &Tensor) -> (Tensor, Tensor) {
        if let ([t], [i]) = (self.text.as_slice(), self.image.as_slice()) {
            return (joint.narrow(1, 0, *t), joint.narrow(1, *t, *i));
        }
        let mut off = 0;
        let (mut text, mut image) = (Vec::new(), Vec::new());
        for (&t, &i) in self.text.iter().zip(&self.image) {
            text.push(joint.narrow(1, off, t));
            image.push(joint.narrow(1, off + t, i));
            off += t + i;
        }
        (Tensor::cat(&text, 1), Tensor::cat(&image, 1))
    }

    /// Each sample's `(start, length)` in the joint sequence.
    pub fn spans(&self) -> Vec<(i64, i64)> {
        let mut off = 0;
        self.text
            .iter()
            .zip(&self.image)
            .map(|(&t, &i)| {
                let span = (off, t + i);
                off += t + i;
                span
            })
            .collect()
    }

    /// The image stream `[1, ΣSi, C]` cut into each sample's `[Si, C]`.
    pub fn unpack_image(&self, image: &Tensor) -> Vec<Tensor> {
        let mut off = 0;
        self.image
            .iter()
            .map(|&n| {
                let part = image.narrow(1, off, n).squeeze_dim(0);
                off += n;
                part
            })
            .collect()
    }
}
