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

/// The Wan 2.1 video VAE.
pub struct AutoencoderKLWan {
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

    /// Video `[B, 3, 4k+1, H, W]` in [-1, 1] → posterior parameters `[B, 2*z, k+1, H/8, W/8]`
    /// (mean, then log-variance), encoding the first frame and then chunks of 4.
    pub fn encode_params(&self, video: &Tensor) -> Result<Tensor> {
        let s = video.size();
        let (tf, sf) = (self.cfg.temporal_factor(), self.cfg.spatial_factor());
        ensure!(
            s.len() == 5 && s[1] == self.cfg.in_channels && (s[2] - 1) % tf == 0 && s[3] % sf == 0 && s[4] % sf == 0,
            "vae encode: video {s:?} must be [B, {}, {tf}k+1, H, W] with H and W multiples of {sf}",
            self.cfg.in_channels
        );
        let video = video.to_kind(self.kind);
        let mut cache = FeatCache::default();
        let mut outs = vec![self.encoder.forward(&video.narrow(2, 0, 1), &mut cache)];
        for i in 0..(s[2] - 1) / tf {
            outs.push(self.encoder.forward(&video.narrow(2, 1 + tf * i, tf), &mut cache));
        }
        Ok(self.quant_conv.forward(&Tensor::cat(&outs, 2), None).to_kind(Kind::Float))
    }

    /// The posterior mean (diffusers `latent_dist.mode()`).
    pub fn encode(&self, video: &Tensor) -> Result<Tensor> {
        Ok(self.encode_params(video)?.narrow(1, 0, self.cfg.z_dim))
    }

    /// Latents `[B, z, k+1, h, w]` → video `[B, 3, 4k+1, 8h, 8w]` clamped to [-1, 1], one latent
    /// frame per decoder pass.
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
        let outs: Vec<Tensor> = (0..s[2])
            .map(|i| self.decoder.forward(&x.narrow(2, i, 1), &mut cache).to_kind(Kind::Float).clamp(-1.0, 1.0))
            .collect();
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
        Ok(self.decoder.forward(&x, &mut stream.cache).to_kind(Kind::Float).clamp(-1.0, 1.0))
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
