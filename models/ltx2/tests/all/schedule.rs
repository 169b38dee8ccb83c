//! LTX-2's noise levels against diffusers' scheduler as `LTX2Pipeline` sets it up
//! (tests/fixtures/make_ltx2_fixtures.py): the published scheduler config, `mu` from the token
//! count, the terminal stretch; and the one-step schedule the stretch leaves undefined, refused.

use crate::common::{fixture, load};
use fastvideo_ltx2::schedule::Ltx2Schedule;

/// float32 as numpy computes it: exact to one ulp.
#[test]
fn the_sigmas_match_the_pipelines() {
    let s = Ltx2Schedule::load(&fixture("scheduler/scheduler_config.json")).unwrap();
    let f = load("schedule.safetensors");
    for (tokens, steps) in [(18i64, 8usize), (6144, 40), (6144, 2)] {
        let ours = s.sigmas(steps, tokens, None).unwrap();
        let want = Vec::<f32>::try_from(&f[&format!("sigmas_{tokens}_{steps}")]).unwrap();
        assert_eq!(ours.len(), want.len());
        for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-6, "{tokens} tokens, {steps} steps, sigma {i}: {a} vs {b}");
        }
    }
    let e = s.sigmas(1, 6144, None).unwrap_err().to_string();
    assert!(e.contains("diffusion.num_inference_steps: 1 step is not defined"), "{e}");
}
