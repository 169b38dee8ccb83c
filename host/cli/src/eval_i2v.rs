//! `fastvideo eval --i2v`: image-to-video as numbers. Per (scene, seed) the scene's ground-truth
//! clip is rendered, its first frame becomes the request's picture (as a PNG, through the same
//! decoding every front end uses), and the generated clip is scored three ways:
//! - first-frame PSNR against the picture (does the video start from it);
//! - the classical analyzer's colour, shape, motion and background against the scene (does it
//!   continue as the prompt says);
//! - the same picture under the prompt with the opposite motion (left for right, shrinking for
//!   growing): does the object then move the other way. A model that read the motion off the
//!   picture alone would fail this.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use base64::Engine;
use fastvideo_pipeline::{PipelineSpec, Values};
use fastvideo_procedural::{analyze, psnr, render, Clip, Scene, Tally, Variation};
use fastvideo_request::{ImageRole, InputPart, OmniRequest, ResolvedRequest, TaskType, VideoArtifact};
use serde::Serialize;
use tch::Device;

/// What one evaluation needs from `fastvideo eval`'s arguments.
pub struct I2vEval<'a> {
    pub scenes: &'a [Scene],
    pub seeds: u64,
    pub device: Device,
    pub dump: Option<&'a Path>,
    pub verbose: bool,
    pub json: bool,
}

/// The figures printed and written as JSON.
#[derive(Debug, Serialize)]
pub struct I2vScores {
    pub clips: usize,
    pub first_frame_psnr_mean: f64,
    pub first_frame_psnr_min: f64,
    pub tally: Tally,
    /// Clips whose object moved as a prompt with the opposite motion said.
    pub swapped_motion_followed: usize,
    pub seconds_per_clip: f64,
}

/// Runs the evaluation. `request(prompt, seed, png)` builds the resolved request for one clip
/// (the caller applies its sampling and plugin flags).
pub fn run(
    eval: I2vEval,
    spec: Arc<PipelineSpec>,
    request: impl Fn(&str, u64, &[u8]) -> Result<ResolvedRequest>,
) -> Result<I2vScores> {
    // The size comes from the request as resolved (model defaults, then flags).
    let probe = request(&eval.scenes[0].prompt(), 0, &png(&[128; 3], 1, 1)?)?;
    let (f, h, w) = (probe.num_frames as usize, probe.height as usize, probe.width as usize);
    if h != w {
        bail!("--i2v renders square scenes: --width and --height must agree");
    }
    let bar = indicatif::ProgressBar::new(eval.scenes.len() as u64 * eval.seeds);
    let (mut tally, mut swapped, mut psnrs, mut seconds) = (Tally::default(), 0usize, Vec::new(), Vec::new());
    for scene in eval.scenes {
        for seed in 0..eval.seeds {
            let truth = render(scene, &Variation::sample(seed), f, h);
            let picture = truth.frame(0);
            let picture_png = png(picture, w, h)?;
            let t0 = Instant::now();
            let video = generate(&spec, request(&scene.prompt(), seed, &picture_png)?, eval.device)?;
            seconds.push(t0.elapsed().as_secs_f64());
            let first = psnr(&video.rgb[..picture.len()], picture);
            psnrs.push(first);
            let got = analyze(&clip(&video));
            let ok = tally.add(scene, &got);
            let other = Scene { motion: scene.motion.opposite(), ..*scene };
            let swapped_video = generate(&spec, request(&other.prompt(), seed, &picture_png)?, eval.device)?;
            let swapped_got = analyze(&clip(&swapped_video));
            let followed = swapped_got.motion == Some(other.motion);
            swapped += followed as usize;
            if eval.verbose {
                let line = format!(
                    "{} {} seed {seed}: first frame {first:.1} dB, {got:?}; as `{}`: {:?}",
                    if ok && followed { "ok  " } else { "MISS" },
                    scene.prompt(),
                    other.motion.word(),
                    swapped_got.motion
                );
                bar.suspend(|| eprintln!("{line}"));
            }
            if let Some(d) = eval.dump {
                let name = scene.prompt().replace(' ', "_");
                std::fs::write(d.join(format!("{name}_s{seed}_start.png")), &picture_png)?;
                fastvideo_media::write_mp4(&video, &d.join(format!("{name}_s{seed}.mp4")))?;
                fastvideo_media::write_mp4(
                    &swapped_video,
                    &d.join(format!("{name}_s{seed}_as_{}.mp4", other.motion.word())),
                )?;
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let n = psnrs.len().max(1) as f64;
    let scores = I2vScores {
        clips: tally.clips,
        first_frame_psnr_mean: psnrs.iter().sum::<f64>() / n,
        first_frame_psnr_min: psnrs.iter().copied().fold(f64::INFINITY, f64::min),
        tally,
        swapped_motion_followed: swapped,
        seconds_per_clip: seconds.iter().sum::<f64>() / seconds.len().max(1) as f64,
    };
    print(&scores, &probe, eval.json)?;
    Ok(scores)
}

fn print(s: &I2vScores, probe: &ResolvedRequest, json: bool) -> Result<()> {
    let acc = s.tally.accuracy();
    let pct = |x: f64| x * 100.0;
    eprintln!(
        "{} clips, {} {} steps, guidance {}, {}x{}x{}",
        s.clips,
        probe.sampler.as_str(),
        probe.steps,
        probe.guidance_scale,
        probe.num_frames,
        probe.width,
        probe.height
    );
    eprintln!(
        "| first-frame PSNR (mean / min) | colour | shape | motion | background | motion, opposite prompt | s/clip |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    eprintln!(
        "| {:.1} / {:.1} dB | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.2} |",
        s.first_frame_psnr_mean,
        s.first_frame_psnr_min,
        pct(acc.color),
        pct(acc.shape),
        pct(acc.motion),
        pct(acc.background),
        pct(s.swapped_motion_followed as f64 / s.clips.max(1) as f64),
        s.seconds_per_clip
    );
    if json {
        let v = serde_json::json!({ "i2v": s, "accuracy": acc });
        writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}

/// An image-to-video request for `prompt` starting from the PNG `picture`.
pub fn i2v_request(prompt: &str, seed: u64, picture: &[u8]) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(format!("eval-i2v-{seed}"), prompt);
    r.task = TaskType::I2v;
    r.inputs.push(InputPart::Image {
        path: None,
        b64: Some(base64::engine::general_purpose::STANDARD.encode(picture)),
        role: ImageRole::FirstFrame,
    });
    r.sampling.seed = Some(seed);
    r
}

fn generate(spec: &Arc<PipelineSpec>, req: ResolvedRequest, device: Device) -> Result<VideoArtifact> {
    let out = fastvideo_assembly::run_once(spec.clone(), req, device, Values::default(), &mut |_| {})?;
    Ok(out.video().context("the pipeline produced no video")?.clone())
}

fn clip(v: &VideoArtifact) -> Clip {
    Clip { frames: v.num_frames as usize, height: v.height as usize, width: v.width as usize, rgb: v.rgb.clone() }
}

/// `rgb` (`height * width * 3` bytes) as a PNG file's bytes.
pub fn png(rgb: &[u8], width: usize, height: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width as u32, height as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()?;
    Ok(out)
}
