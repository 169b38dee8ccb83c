//! `fastvideo bench-ltx2`'s measurement on the tiny transformer: the shapes it times are the
//! pipeline's (video tokens from the latent grid, audio tokens from the clip's duration), and
//! every weight is counted. (Times are reported, not asserted.)

use fastvideo_ltx2::bench::{run, BenchOptions};
use tch::{Device, Kind};

use crate::common::fixture;

#[test]
fn the_bench_times_the_pipelines_shapes() {
    let opts = BenchOptions {
        frames: 17,
        height: 64,
        width: 96,
        fps: 24.0,
        text_len: 16,
        text_width: 12,
        audio_text_width: 12,
        runs: 1,
    };
    let r = run(&fixture("transformer_20/config.json"), Device::Cpu, Kind::Float, &opts).unwrap();
    // vae_scale_factors (8, 32, 32): (17 − 1)/8 + 1 = 3 frames of 2 × 3; 17/24 s at 25 latents/s.
    assert_eq!((r.video_tokens, r.audio_tokens), (18, 18));
    assert!(r.weight_bytes > 0 && r.forward_s > 0.0 && r.step_s > 0.0);
}
