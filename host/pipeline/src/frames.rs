//! Decoded frames as the video a request gets back: the one conversion from a VAE's output
//! (`[1, 3, F, H, W]` in [-1, 1]) to 8-bit RGB that every family's assemble step and every
//! local tool (a VAE round trip, an offline rollout) shares, so their bytes agree.

use anyhow::{ensure, Result};
use fastvideo_request::VideoArtifact;
use tch::{Device, Kind, Tensor};

/// `frames` (`[1, 3, F, H, W]`, values in [-1, 1]) as row-major RGB bytes at `fps`: scaled to
/// [0, 255], clamped and rounded to nearest.
pub fn frames_to_video(frames: &Tensor, fps: u32) -> Result<VideoArtifact> {
    let (b, c, f, h, w) = frames.size5()?;
    ensure!(b == 1 && c == 3, "assemble: frames {:?} must be [1, 3, F, H, W]", frames.size());
    let rgb = ((frames.squeeze_dim(0) / 2.0 + 0.5).clamp(0.0, 1.0) * 255.0)
        .round()
        .to_kind(Kind::Uint8)
        .permute([1, 2, 3, 0])
        .contiguous()
        .to_device(Device::Cpu);
    Ok(VideoArtifact {
        fps,
        num_frames: f as u32,
        height: h as u32,
        width: w as u32,
        rgb: Vec::<u8>::try_from(rgb.flatten(0, -1))?,
    })
}

/// The assemble node every family's graph ends with: the decoded frames under `frames` as the
/// video artifact under `video`, at the request's frame rate.
pub struct AssembleVideo {
    /// Value name of the decoded frames `[1, 3, F, H, W]`.
    pub frames: &'static str,
    /// Value name the video is written to.
    pub video: &'static str,
}

impl crate::Stage for AssembleVideo {
    fn run(&self, ctx: &crate::NodeCtx, values: &mut crate::Values) -> Result<()> {
        let video = frames_to_video(values.tensor(self.frames)?, ctx.request.fps)?;
        values.insert(self.video, crate::Value::Video(video));
        Ok(())
    }
}
