//! A packed sequence: one model input made of segments of different modalities
//! (`[text | vision | sound | action]`), each with how its queries attend, its 3-axis positions
//! and which of its tokens are being denoised. Omni transformers (Cosmos3; LTX-2's joint streams
//! later) read their inputs through it, and batching reads lengths and prefixes from it, so the
//! shape of a request is described once and not re-derived by every family (the seed's
//! `PackedSeq`, §6.3.3).
//!
//! The contract between segments is the attention mode. A [`Attend::Causal`] segment sees only
//! causal segments before it and itself causally: it depends on nothing that comes later, so its
//! per-layer keys and values are a prefix a runtime may compute once and reuse (the prompt of a
//! denoise loop does not change between steps). A [`Attend::Full`] segment sees the whole
//! sequence.

use tch::{Device, Kind, Tensor};

/// What a segment's tokens are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Modality {
    /// Prompt tokens (ids, embedded by the model).
    Text,
    /// Patchified video or image latents.
    Vision,
    /// Sound latents, one token per latent frame.
    Sound,
    /// Robot actions, one token per step.
    Action,
}

/// How a segment's queries attend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attend {
    /// Over the causal segments before it and itself, causally: a cacheable prefix.
    Causal,
    /// Over every token of the sequence.
    Full,
}

/// One segment of a [`PackedSeq`].
#[derive(Debug)]
pub struct Segment {
    /// Its modality.
    pub modality: Modality,
    /// How its queries attend.
    pub attend: Attend,
    /// Token grid `(t, h, w)`; `len = t·h·w`. Text and 1-D modalities are `(len, 1, 1)`.
    pub grid: [i64; 3],
    /// Positions `[3, len]` float32 (temporal, height, width), fractional where the model's
    /// positions are (fps-modulated time).
    pub positions: Tensor,
    /// Frames (along `grid[0]`) being denoised, ascending; the rest are clean conditioning.
    /// Empty for text.
    pub noisy_frames: Vec<i64>,
}

impl Segment {
    /// Tokens in the segment.
    pub fn len(&self) -> i64 {
        self.grid.iter().product()
    }

    /// Whether the segment has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens per frame (`h·w`).
    pub fn frame_tokens(&self) -> i64 {
        self.grid[1] * self.grid[2]
    }

    /// Token indexes (within the segment) of the noisy frames, ascending.
    pub fn noisy_tokens(&self) -> Vec<i64> {
        let per = self.frame_tokens();
        self.noisy_frames.iter().flat_map(|f| f * per..(f + 1) * per).collect()
    }
}

/// Segments in sequence order.
#[derive(Debug, Default)]
pub struct PackedSeq {
    segments: Vec<Segment>,
}

impl PackedSeq {
    /// An empty sequence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a segment. A causal segment after a full one would see tokens that see it back,
    /// which no prefix cache can serve: refused.
    pub fn push(&mut self, segment: Segment) -> anyhow::Result<()> {
        let (rows, cols) = segment.positions.size2()?;
        anyhow::ensure!(
            rows == 3 && cols == segment.len(),
            "packed sequence: {:?} segment has positions {:?} for {} tokens",
            segment.modality,
            [rows, cols],
            segment.len()
        );
        anyhow::ensure!(
            segment.attend == Attend::Full || self.segments.iter().all(|s| s.attend == Attend::Causal),
            "packed sequence: a causal {:?} segment after a full one",
            segment.modality
        );
        self.segments.push(segment);
        Ok(())
    }

    /// The segments in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Total tokens.
    pub fn len(&self) -> i64 {
        self.segments.iter().map(Segment::len).sum()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens of the leading causal segments: the cacheable prefix.
    pub fn prefix_len(&self) -> i64 {
        self.segments.iter().take_while(|s| s.attend == Attend::Causal).map(Segment::len).sum()
    }

    /// The first segment of `modality` and where it starts in the sequence.
    pub fn find(&self, modality: Modality) -> Option<(i64, &Segment)> {
        let mut start = 0;
        for s in &self.segments {
            if s.modality == modality {
                return Some((start, s));
            }
            start += s.len();
        }
        None
    }

    /// All positions `[3, len]` float32 on `device`.
    pub fn positions(&self, device: Device) -> Tensor {
        let parts: Vec<Tensor> = self.segments.iter().map(|s| s.positions.to_device(device)).collect();
        if parts.is_empty() {
            return Tensor::zeros([3, 0], (Kind::Float, device));
        }
        Tensor::cat(&parts, 1)
    }

    /// Positions `[3, len - prefix_len]` of the full segments only, on `device`.
    pub fn full_positions(&self, device: Device) -> Tensor {
        let p = self.prefix_len();
        self.positions(device).narrow(1, p, self.len() - p)
    }
}

/// Positions `[3, n]` of `n` text tokens from `start`: all three axes equal.
pub fn text_positions(n: i64, start: f64) -> Tensor {
    let ids = Tensor::arange(n, (Kind::Float, Device::Cpu)) + start;
    ids.unsqueeze(0).expand([3, n], false).contiguous()
}
