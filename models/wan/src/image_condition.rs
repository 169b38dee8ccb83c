//! The conditioning latents of Wan 2.1 image-to-video and first-and-last-frame models (diffusers
//! `WanImageToVideoPipeline.prepare_latents`): the given frame(s) at their place in an otherwise
//! black video, VAE-encoded (the posterior mean) and normalised, behind a 4-channel mask saying
//! which frames are given. The transformer sees `[noise latents, mask, encoded]` on channels.

use anyhow::{ensure, Result};
use tch::{Kind, Tensor};

use crate::vae::AutoencoderKLWan;

/// `first` (and `last`) `[B, 3, H, W]` in [-1, 1] → `[B, 4 + z, T, H/8, W/8]` for `num_frames`
/// frames (`4k + 1`): the mask, then the encoded frames. With `last`, the video's last frame is
/// given too (FLF2V).
pub fn image_condition(
    vae: &AutoencoderKLWan,
    first: &Tensor,
    last: Option<&Tensor>,
    num_frames: i64,
) -> Result<Tensor> {
    let (b, c, h, w) = first.size4()?;
    if let Some(l) = last {
        ensure!(l.size() == first.size(), "last frame {:?} must match the first frame {:?}", l.size(), first.size());
    }
    let tf = vae.cfg.temporal_factor();
    let need = if last.is_some() { 2 } else { 1 };
    ensure!(
        num_frames >= need && (num_frames - 1) % tf == 0,
        "image condition: {num_frames} frames (must be {tf}k+1, at least {need})"
    );
    let opts = (first.kind(), first.device());
    let mut frames = vec![first.unsqueeze(2)];
    let blank = num_frames - need;
    if blank > 0 {
        frames.push(Tensor::zeros([b, c, blank, h, w], opts));
    }
    if let Some(l) = last {
        frames.push(l.unsqueeze(2));
    }
    let encoded = vae.normalize(&vae.encode(&Tensor::cat(&frames, 2))?);
    let (_, _, t, lh, lw) = encoded.size5()?;
    // One mask value per video frame, the first repeated to fill its latent frame's 4 slots; the
    // slots of each latent frame then become the 4 mask channels.
    let given = Tensor::zeros([num_frames], (Kind::Float, first.device()));
    let _ = given.get(0).fill_(1.0);
    if last.is_some() {
        let _ = given.get(num_frames - 1).fill_(1.0);
    }
    let slots = Tensor::cat(&[given.narrow(0, 0, 1).repeat([tf]), given.narrow(0, 1, num_frames - 1)], 0);
    let mask = slots.view([t, tf]).transpose(0, 1).view([1, tf, t, 1, 1]).expand([b, tf, t, lh, lw], false);
    Ok(Tensor::cat(&[mask.to_kind(encoded.kind()), encoded], 1))
}
