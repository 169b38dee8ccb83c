//! The packed sequence of one Cosmos3 branch, as `Cosmos3OmniPipeline` lays it out:
//! `[text | vision | sound | action]`, text causal, the rest full; positions per
//! [`crate::positions`]. Branches (prompt and negative prompt) differ only in the prompt's
//! length, which moves every generated modality's time offset.

use anyhow::{ensure, Result};
use fastvideo_pipeline::packed::{text_positions, Attend, Modality, PackedSeq, Segment};

use crate::config::Cosmos3Config;
use crate::positions::{grid_positions, TimeAxis};

/// What a request generates and conditions on, in latent units.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Vision latent `(T, h, w)`.
    pub vision: [i64; 3],
    /// Latent frames given clean (conditioning), not denoised.
    pub vision_clean: Vec<i64>,
    /// Video frames per latent frame (the VAE's temporal compression).
    pub temporal_compression: i64,
    /// The request's frame rate.
    pub fps: f64,
    /// Sound latent frames, when sound is generated.
    pub sound: Option<i64>,
    /// Action steps and which of them are given clean, when actions are in the sequence.
    pub action: Option<(i64, Vec<i64>)>,
}

fn noisy(frames: i64, clean: &[i64]) -> Vec<i64> {
    (0..frames).filter(|f| !clean.contains(f)).collect()
}

/// The packed sequence of a branch whose prompt has `prompt_len` tokens.
pub fn pack(cfg: &Cosmos3Config, prompt_len: i64, layout: &Layout) -> Result<PackedSeq> {
    ensure!(prompt_len > 0, "Cosmos3: an empty prompt");
    let modulate = |fps: f64| cfg.enable_fps_modulation.then_some(fps);
    let reset = cfg.unified_3d_mrope_reset_spatial_ids;
    let offset = prompt_len + cfg.unified_3d_mrope_temporal_modality_margin;
    let mut seq = PackedSeq::new();
    seq.push(Segment {
        modality: Modality::Text,
        attend: Attend::Causal,
        grid: [prompt_len, 1, 1],
        positions: text_positions(prompt_len, 0.0),
        noisy_frames: vec![],
    })?;
    let p = cfg.latent_patch_size;
    let [t, h, w] = layout.vision;
    let grid = [t, (h + p - 1) / p, (w + p - 1) / p];
    let axis = TimeAxis {
        fps: modulate(layout.fps),
        base_fps: cfg.base_fps,
        compression: layout.temporal_compression,
        base_compression: layout.temporal_compression,
        start: 0,
    };
    seq.push(Segment {
        modality: Modality::Vision,
        attend: Attend::Full,
        grid,
        positions: grid_positions(grid, offset, axis, reset),
        noisy_frames: noisy(t, &layout.vision_clean),
    })?;
    if let Some(n) = layout.sound {
        let axis = TimeAxis {
            fps: modulate(cfg.sound_latent_fps),
            base_fps: cfg.base_fps,
            compression: 1,
            base_compression: 1,
            start: 0,
        };
        seq.push(Segment {
            modality: Modality::Sound,
            attend: Attend::Full,
            grid: [n, 1, 1],
            positions: grid_positions([n, 1, 1], offset, axis, reset),
            noisy_frames: (0..n).collect(),
        })?;
    }
    if let Some((n, clean)) = &layout.action {
        let axis = TimeAxis {
            fps: modulate(layout.fps),
            base_fps: cfg.base_fps,
            compression: 1,
            base_compression: layout.temporal_compression,
            start: 1,
        };
        seq.push(Segment {
            modality: Modality::Action,
            attend: Attend::Full,
            grid: [*n, 1, 1],
            positions: grid_positions([*n, 1, 1], offset, axis, reset),
            noisy_frames: noisy(*n, clean),
        })?;
    }
    Ok(seq)
}
