//! `AutoencoderKLWan`: encode (first frame, then chunks of 4), decode (one latent frame per
//! pass, whole or streamed) and the latent normalization.

use anyhow::{ensure, Result};
use tch::{Kind, Tensor};

use super::cache::FeatCache;
use super::coder::Coder;
use super::config::VaeConfig;
use super::conv::CausalConv3d;
use super::decoder::decoder;
use super::encoder::encoder;
use crate::weights::Weights;

/// The Wan video VAE (2.1, or 2.2's residual one).
pub struct AutoencoderKLWan {
    /// Its config.
    pub cfg: VaeConfig,
    encoder: Coder,
    quant_conv: CausalConv3d,
    post_quant_conv: CausalConv3d,
    decoder: Coder,
    /// The compute dtype (weights were converted to it at load); inputs are cast to it and
    /// outputs come back in float32.
    kind: Kind,
}

/// The causal decoder's cache between the latent frames of one stream (a world-model session).
#[derive(Default)]
pub struct DecodeStream {
    cache: FeatCache,
}

// SAFETY: weights are written once in `new` and only read afterwards; the feature cache is
// per call, never stored in `self`.
unsafe impl Sync for AutoencoderKLWan {}

impl AutoencoderKLWan {
    /// Builds the VAE from `w` in `cfg`'s shape.
    pub fn new(cfg: VaeConfig, w: &Weights) -> Result<Self> {
        let z = cfg.z_dim;
        Ok(Self {
            encoder: encoder(&w.pp("encoder"), &cfg)?,
            quant_conv: CausalConv3d::pointwise(&w.pp("quant_conv"), 2 * z, 2 * z)?,
            post_quant_conv: CausalConv3d::pointwise(&w.pp("post_quant_conv"), z, z)?,
            decoder: decoder(&w.pp("decoder"), &cfg)?,
            kind: w.kind(),
            cfg,
        })
    }

    /// Video `[B, 3, 4k+1, H, W]` in [-1, 1] → posterior parameters `[B, 2*z, k+1, H/s, W/s]`
    /// (mean, then log-variance; `s` = [`spatial_factor`](VaeConfig::spatial_factor)), encoding
    /// the first frame and then chunks of 4.
    pub fn encode_params(&self, video: &Tensor) -> Result<Tensor> {
        let s = video.size();
        let (tf, sf) = (self.cfg.temporal_factor(), self.cfg.spatial_factor());
        ensure!(
            s.len() == 5 && s[1] == 3 && (s[2] - 1) % tf == 0 && s[3] % sf == 0 && s[4] % sf == 0,
            "vae encode: video {s:?} must be [B, 3, {tf}k+1, H, W] with H and W multiples of {sf}"
        );
        let video = patchify(&video.to_kind(self.kind), self.cfg.patch());
        let mut cache = FeatCache::default();
        let mut outs = vec![self.encoder.forward(&video.narrow(2, 0, 1), &mut cache, true)];
        for i in 0..(s[2] - 1) / tf {
            outs.push(self.encoder.forward(&video.narrow(2, 1 + tf * i, tf), &mut cache, false));
        }
        Ok(self.quant_conv.forward(&Tensor::cat(&outs, 2), None).to_kind(Kind::Float))
    }

    /// The posterior mean (diffusers `latent_dist.mode()`).
    pub fn encode(&self, video: &Tensor) -> Result<Tensor> {
        Ok(self.encode_params(video)?.narrow(1, 0, self.cfg.z_dim))
    }

    /// Latents `[B, z, k+1, h, w]` → video `[B, 3, 4k+1, s·h, s·w]` clamped to [-1, 1], one
    /// latent frame per decoder pass.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.z_dim,
            "vae decode: latents {s:?} must be [B, {}, F, H, W]",
            self.cfg.z_dim
        );
        let x = self.post_quant_conv.forward(&z.to_kind(self.kind), None);
        let mut cache = FeatCache::default();
        // Each decoded chunk is clamped and moved to float32 as it comes, so only one chunk's
        // activations in the compute dtype are alive at a time.
        let outs: Vec<Tensor> = (0..s[2]).map(|i| self.decode_chunk(&x.narrow(2, i, 1), &mut cache, i == 0)).collect();
        Ok(Tensor::cat(&outs, 2))
    }

    /// Decodes the next latent frame of a stream (`z [B, z, 1, h, w]`, denormalized) with the
    /// causal cache `stream` carries from the frames before it: the first call gives one video
    /// frame, each later one `temporal_factor` frames, exactly the frames [`decode`](Self::decode)
    /// of the whole sequence would give there.
    pub fn decode_next(&self, stream: &mut DecodeStream, z: &Tensor) -> Result<Tensor> {
        let s = z.size();
        ensure!(
            s.len() == 5 && s[1] == self.cfg.z_dim && s[2] == 1,
            "vae decode: latent frame {s:?} must be [B, {}, 1, H, W]",
            self.cfg.z_dim
        );
        let x = self.post_quant_conv.forward(&z.to_kind(self.kind), None);
        let first = stream.cache.is_fresh();
        Ok(self.decode_chunk(&x, &mut stream.cache, first))
    }

    /// One latent frame through the decoder, unpatchified, clamped, in float32.
    fn decode_chunk(&self, x: &Tensor, cache: &mut FeatCache, first: bool) -> Tensor {
        let out = self.decoder.forward(x, cache, first);
        unpatchify(&out, self.cfg.patch()).to_kind(Kind::Float).clamp(-1.0, 1.0)
    }

    /// Undoes the per-channel latent normalization the transformer was trained on
    /// (`latents * std + mean`), ready for [`decode`](Self::decode).
    pub fn denormalize(&self, latents: &Tensor) -> Tensor {
        let (mean, std) = self.stats(latents);
        latents * std + mean
    }

    /// Normalizes encoder output for the transformer (`(mean - m) / std`).
    pub fn normalize(&self, latents: &Tensor) -> Tensor {
        let (mean, std) = self.stats(latents);
        (latents - mean) / std
    }

    fn stats(&self, like: &Tensor) -> (Tensor, Tensor) {
        let z = self.cfg.z_dim;
        let opts = (like.kind(), like.device());
        let mean = Tensor::from_slice(&self.cfg.latents_mean).view([1, z, 1, 1, 1]).to_kind(opts.0).to_device(opts.1);
        let std = Tensor::from_slice(&self.cfg.latents_std).view([1, z, 1, 1, 1]).to_kind(opts.0).to_device(opts.1);
        (mean, std)
    }
}

/// `[B, C, F, H, W]` → `[B, C·p², F, H/p, W/p]`, each `p`×`p` patch's pixels as channels in
/// diffusers' order (channel `c·p² + pw·p + ph`: the column offset before the row offset).
fn patchify(x: &Tensor, p: i64) -> Tensor {
    if p == 1 {
        return x.shallow_clone();
    }
    let (b, c, f, h, w) = x.size5().expect("video");
    x.view([b, c, f, h / p, p, w / p, p].as_slice()).permute([0, 1, 6, 4, 2, 3, 5]).contiguous().view([
        b,
        c * p * p,
        f,
        h / p,
        w / p,
    ])
}

/// The inverse of [`patchify`].
fn unpatchify(x: &Tensor, p: i64) -> Tensor {
    if p == 1 {
        return x.shallow_clone();
    }
    let (b, cp, f, h, w) = x.size5().expect("video");
    let c = cp / (p * p);
    x.view([b, c, p, p, f, h, w].as_slice()).permute([0, 1, 4, 5, 3, 6, 2]).contiguous().view([b, c, f, h * p, w * p])
}
