//! The decoder: `conv_in` on clamped latents, three stages of (three memory blocks, nearest 2×
//! upsampling, a 1×1 "grow" convolution multiplying the frames by its stride, a 3×3 projection),
//! then `conv_out`. Frames run side by side as a batch of 2-D images; a memory block sees its
//! input and that input one frame earlier, so a stream that carries each block's last input
//! frame decodes chunk by chunk exactly what the whole sequence gives.

use std::path::Path;

use anyhow::{ensure, Result};
use tch::{Device, Kind, Tensor};

use super::config::TinyDecoderConfig;
use crate::weights::Weights;

/// Latent frames per pass of [`TinyVideoDecoder::decode`]. At 480×832 the last stage holds a few
/// hundred MB of activations per output frame, so a whole 81-frame clip in one pass peaked at
/// tens of GB; two latent frames (eight output frames) keep that near 1–2 GB while each pass
/// still fills the device.
pub const DECODE_CHUNK_FRAMES: i64 = 2;

/// A 2-D convolution, `padding` on each side.
struct Conv {
    weight: Tensor,
    bias: Option<Tensor>,
    padding: i64,
}

impl Conv {
    fn new(w: &Weights, n_in: i64, n_out: i64, k: i64, bias: bool) -> Result<Self> {
        let weight = w.get("weight", &[n_out, n_in, k, k])?;
        let bias = if bias { Some(w.get("bias", &[n_out])?) } else { None };
        Ok(Self { weight, bias, padding: k / 2 })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.conv2d(&self.weight, self.bias.as_ref(), [1, 1], [self.padding, self.padding], [1, 1], 1)
    }
}

/// `relu(conv(cat[x, past]) + x)`, the conv being 3×3 → ReLU → 3×3 → ReLU → 3×3.
struct MemoryBlock {
    convs: [Conv; 3],
}

impl MemoryBlock {
    fn new(w: &Weights, n: i64) -> Result<Self> {
        let c = w.pp("conv");
        Ok(Self {
            convs: [
                Conv::new(&c.pp(0), 2 * n, n, 3, true)?,
                Conv::new(&c.pp(2), n, n, 3, true)?,
                Conv::new(&c.pp(4), n, n, 3, true)?,
            ],
        })
    }

    fn forward(&self, x: &Tensor, past: &Tensor) -> Tensor {
        let h = self.convs[0].forward(&Tensor::cat(&[x, past], 1)).relu();
        let h = self.convs[1].forward(&h).relu();
        (self.convs[2].forward(&h) + x).relu()
    }
}

struct Stage {
    blocks: [MemoryBlock; 3],
    grow: Conv,
    time_stride: i64,
    space_up: bool,
    proj: Conv,
}

/// The tiny decoder's weights.
pub struct TinyVideoDecoder {
    /// The decoder's shape.
    pub cfg: TinyDecoderConfig,
    conv_in: Conv,
    stages: Vec<Stage>,
    conv_out: Conv,
    kind: Kind,
}

// SAFETY: weights are written once in `new` and only read afterwards; streams are per caller.
unsafe impl Sync for TinyVideoDecoder {}

/// What a stream carries between chunks: each memory block's last input frame (`[B, C, H, W]`),
/// and whether the first chunk (whose leading `time_factor - 1` frames are dropped) was decoded.
#[derive(Default)]
pub struct TinyDecodeStream {
    memory: Vec<Option<Tensor>>,
    started: bool,
}

impl TinyVideoDecoder {
    /// Builds the decoder from `w` in `cfg`'s shape.
    pub fn new(cfg: TinyDecoderConfig, w: &Weights) -> Result<Self> {
        let c = cfg.channels;
        let stages = (0..3)
            .map(|i| {
                let s = w.pp("stages").pp(i);
                let n = c[i];
                let time_stride = if cfg.time_upscale[i] { 2 } else { 1 };
                let block = |j: usize| MemoryBlock::new(&s.pp("blocks").pp(j), n);
                Ok(Stage {
                    blocks: [block(0)?, block(1)?, block(2)?],
                    grow: Conv::new(&s.pp("grow"), n, n * time_stride, 1, false)?,
                    time_stride,
                    space_up: cfg.space_upscale[i],
                    proj: Conv::new(&s.pp("proj"), n, c[i + 1], 3, false)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            conv_in: Conv::new(&w.pp("conv_in"), cfg.latent_channels, c[0], 3, true)?,
            conv_out: Conv::new(&w.pp("conv_out"), c[3], 3 * cfg.patch_size * cfg.patch_size, 3, true)?,
            stages,
            kind: w.kind(),
            cfg,
        })
    }

    /// `tiny_vae/` of a model folder (config.json and the safetensors weights).
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self> {
        let cfg = TinyDecoderConfig::load(&dir.join("config.json"))?;
        let w = Weights::from_dir(dir, "diffusion_pytorch_model", device, kind)?;
        let d = Self::new(cfg, &w)?;
        w.warn_unused("tiny_vae");
        Ok(d)
    }

    /// Latents `[B, z, T, h, w]` (denormalized, what the full VAE decodes) → video
    /// `[B, 3, time_factor·(T−1)+1, H, W]` in [-1, 1], float32: the full VAE's frame count.
    /// In chunks of [`DECODE_CHUNK_FRAMES`] latent frames, so a long clip holds one chunk's
    /// activations at a time, not the whole clip's.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        self.decode_chunked(z, DECODE_CHUNK_FRAMES)
    }

    /// [`decode`](Self::decode) in passes of `chunk` latent frames (a stream, so the frames are
    /// those of one pass over the whole sequence), each written into the preallocated video.
    pub fn decode_chunked(&self, z: &Tensor, chunk: i64) -> Result<Tensor> {
        ensure!(chunk >= 1, "tiny decoder: chunks of {chunk} latent frames");
        self.check(z)?;
        let t = z.size()[2];
        let mut stream = TinyDecodeStream::default();
        if t <= chunk {
            return self.decode_next(&mut stream, z);
        }
        let (mut video, mut at) = (None::<Tensor>, 0);
        for start in (0..t).step_by(chunk as usize) {
            let part = self.decode_next(&mut stream, &z.narrow(2, start, chunk.min(t - start)))?;
            let s = part.size();
            let video = video.get_or_insert_with(|| {
                let frames = self.cfg.time_factor() * (t - 1) + 1;
                Tensor::empty([s[0], s[1], frames, s[3], s[4]], (Kind::Float, part.device()))
            });
            video.narrow(2, at, s[2]).copy_(&part);
            at += s[2];
        }
        Ok(video.expect("at least one chunk"))
    }

    fn check(&self, z: &Tensor) -> Result<()> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.latent_channels && s[2] >= 1,
            "tiny decoder: latents {s:?} must be [B, {}, T, H, W]",
            self.cfg.latent_channels
        );
        Ok(())
    }

    /// The next chunk of a stream (`z [B, z, T, h, w]`, any `T ≥ 1`): the first chunk gives
    /// `time_factor·(T−1)+1` frames, each later one `time_factor·T`, exactly the frames
    /// [`decode`](Self::decode) of the whole sequence gives there.
    pub fn decode_next(&self, stream: &mut TinyDecodeStream, z: &Tensor) -> Result<Tensor> {
        self.check(z)?;
        let s = z.size();
        let (b, t) = (s[0], s[2]);
        stream.memory.resize_with(9, || None);
        let mut x = z.to_kind(self.kind).permute([0, 2, 1, 3, 4]).reshape([b * t, s[1], s[3], s[4]]);
        x = self.conv_in.forward(&((&x / 3.0).tanh() * 3.0)).relu();
        for (i, stage) in self.stages.iter().enumerate() {
            for (j, block) in stage.blocks.iter().enumerate() {
                let memory = &mut stream.memory[3 * i + j];
                let past = shifted(&x, b, memory.take());
                let (nt, c, h, w) = x.size4()?;
                // A copy: a view would keep the block's whole input alive between chunks.
                *memory = Some(x.view([b, nt / b, c, h, w]).select(1, nt / b - 1).copy());
                x = block.forward(&x, &past);
            }
            if stage.space_up {
                x = x.upsample_nearest2d([x.size()[2] * 2, x.size()[3] * 2], None, None);
            }
            let (nt, c, h, w) = x.size4()?;
            x = stage.proj.forward(&stage.grow.forward(&x).reshape([nt * stage.time_stride, c, h, w]));
        }
        x = self.conv_out.forward(&x.relu());
        if self.cfg.patch_size > 1 {
            x = x.pixel_shuffle(self.cfg.patch_size);
        }
        let (nt, _, h, w) = x.size4()?;
        let mut video = x.view([b, nt / b, 3, h, w]).permute([0, 2, 1, 3, 4]);
        if !stream.started {
            let drop = self.cfg.time_factor() - 1;
            video = video.narrow(2, drop, nt / b - drop);
            stream.started = true;
        }
        Ok(video.to_kind(Kind::Float).clamp(-1.0, 1.0))
    }
}

/// `x` (frames `[B·T, C, H, W]`) one frame later: frame `t` gets frame `t − 1`, the first gets
/// `first` (the previous chunk's last frame) or zeros.
fn shifted(x: &Tensor, b: i64, first: Option<Tensor>) -> Tensor {
    let (nt, c, h, w) = x.size4().expect("frames");
    let t = nt / b;
    let frames = x.view([b, t, c, h, w]);
    let first = first.unwrap_or_else(|| frames.select(1, 0).zeros_like()).unsqueeze(1);
    Tensor::cat(&[first, frames.narrow(1, 0, t - 1)], 1).reshape([nt, c, h, w])
}
