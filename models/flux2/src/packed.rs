//! Several samples in one forward, packed by token count: every sample's text and image tokens
//! laid end to end in one sequence (no padding to the longest), projections and feed-forwards
//! run once over all of them, attention runs per sample over its own `[text | image]` span,
//! and each token is modulated by its own sample's timestep. A classifier-free guidance pair
//! is two samples; so is a batch of requests of different sizes.

use tch::{Kind, Tensor};

use crate::embed::Mod;

/// One sample of a packed forward.
pub struct Sample<'a> {
    /// Image tokens `[Si, in]` (noise tokens, then any reference tokens).
    pub image: &'a Tensor,
    /// Prompt embeddings `[St, joint]`.
    pub text: &'a Tensor,
    /// The sample's time in `[0, 1]` (the pipeline's `t / 1000`).
    pub timestep: f32,
    /// Positions `[Si, 4]` of the image tokens.
    pub image_ids: &'a Tensor,
    /// Positions `[St, 4]` of the text tokens.
    pub text_ids: &'a Tensor,
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
    /// The layout of `samples`.
    pub fn of(samples: &[Sample]) -> Self {
        let t0 = samples.first().map_or(0.0, |s| s.timestep);
        Self {
            text: samples.iter().map(|s| s.text.size()[0]).collect(),
            image: samples.iter().map(|s| s.image.size()[0]).collect(),
            one_time: samples.iter().all(|s| s.timestep == t0),
        }
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

    /// The inverse of [`Self::interleave`]: `(text, image)` streams of a joint sequence.
    pub fn split(&self, joint: &Tensor) -> (Tensor, Tensor) {
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

/// The model times `[B]` of `samples` (`t · 1000` in the compute dtype, as the reference).
pub fn timesteps(samples: &[Sample], kind: Kind, device: tch::Device) -> Tensor {
    let t: Vec<f32> = samples.iter().map(|s| s.timestep).collect();
    Tensor::from_slice(&t).to_device(device).to_kind(kind) * 1000.0
}

/// Positions `[h·w, 4]` of an `h`×`w` token grid at time `t`: `(t, row, column, 0)`.
pub fn positions(t: i64, h: i64, w: i64, device: tch::Device) -> Tensor {
    let opts = (Kind::Int64, device);
    let rows = Tensor::arange(h, opts).view([h, 1]).expand([h, w], false).reshape([-1]);
    let cols = Tensor::arange(w, opts).view([1, w]).expand([h, w], false).reshape([-1]);
    let fill = |v: i64| Tensor::full([h * w], v, opts);
    Tensor::stack(&[fill(t), rows, cols, fill(0)], 1)
}

/// Positions `[L, 4]` of `L` text tokens: `(0, 0, 0, index)`.
pub fn text_positions(len: i64, device: tch::Device) -> Tensor {
    let opts = (Kind::Int64, device);
    let zeros = Tensor::zeros([len], opts);
    Tensor::stack(&[zeros.shallow_clone(), zeros.shallow_clone(), zeros, Tensor::arange(len, opts)], 1)
}
