//! `fastvideo eval --world`: the world model rolled out under held-out action sequences, scored
//! with the world's own simulator (`fastvideo_procedural::world::ActionScore`): per chunk, did the ball
//! move as the action said (from where it was, walls included); per frame, is it still there.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use fastvideo_pipeline::session::offline::rollout;
use fastvideo_pipeline::session::{SessionModel, SessionRequest};
use fastvideo_procedural::world::{sample_actions, ActionScore};
use fastvideo_procedural::Clip;
use tch::Device;

/// Action sequences from seeds the training data never used (it takes 0..clips).
const HELD_OUT_SEED: u64 = 5_000_000;

pub fn run(
    sessions: &dyn SessionModel,
    sequences: u64,
    steps: usize,
    device: Device,
    dump: Option<&Path>,
    json: bool,
) -> Result<()> {
    if sequences == 0 || steps < 2 {
        bail!("--seeds must be positive and --world-steps at least 2");
    }
    if let Some(d) = dump {
        std::fs::create_dir_all(d).with_context(|| format!("--dump: creating {}", d.display()))?;
    }
    let mut total = ActionScore::default();
    let (mut frames, t0) = (0usize, Instant::now());
    for i in 0..sequences {
        let actions = sample_actions(HELD_OUT_SEED + i, steps);
        let names: Vec<String> = actions.iter().skip(1).map(|a| a.word().to_string()).collect();
        // Each sequence starts from the simulator's first frame, so every chunk after it is judged
        // against a known world (a generated first frame would be a guess at where things are).
        let asked = SessionRequest { start_seed: Some(HELD_OUT_SEED + i), seed: i, ..Default::default() };
        // Through the session pipeline, as a server's session runs.
        let video = tch::no_grad(|| rollout(sessions, &asked, &names, device, None, |_| {}))?;
        if let Some(d) = dump {
            fastvideo_media::write_mp4(&video, &d.join(format!("world-{i}.mp4")))?;
            let frames_dir = d.join(format!("world-{i}"));
            std::fs::create_dir_all(&frames_dir)?;
            fastvideo_media::write_pngs(&video, &frames_dir)?;
        }
        let clip = Clip {
            frames: video.num_frames as usize,
            height: video.height as usize,
            width: video.width as usize,
            rgb: video.rgb,
        };
        let mut one = ActionScore::default();
        one.add(&clip, &actions);
        if !json {
            eprintln!(
                "sequence {i}: followed {}/{} chunks, ball found in {}/{} frames",
                one.followed, one.chunks, one.found, one.frames
            );
        }
        frames += clip.frames;
        total.followed += one.followed;
        total.chunks += one.chunks;
        total.found += one.found;
        total.frames += one.frames;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "sequences": sequences, "chunks_per_sequence": steps, "score": total,
        "action_following": total.follow_rate(), "ball_found": total.found_rate(),
        "frames_per_second": frames as f64 / seconds,
    });
    if json {
        println!("{report}");
    } else {
        eprintln!(
            "action following {:.1} % of {} chunks, ball found in {:.1} % of {} frames ({:.1} frames/s)",
            100.0 * total.follow_rate(),
            total.chunks,
            100.0 * total.found_rate(),
            total.frames,
            frames as f64 / seconds
        );
    }
    Ok(())
}
