//! Sampler parity against diffusers (fixtures: tests/fixtures/make_fixtures.py,
//! `samplers.safetensors`): timesteps, sigmas and every step's output.

use std::collections::HashMap;
use std::path::Path;

use fastvideo_pipeline::sampler::{Dmd, FlowMatchEuler, Sampler, StepNoise, UniPc, UniPcConfig};
use tch::Tensor;

fn fixtures() -> HashMap<String, Tensor> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/samplers.safetensors");
    Tensor::read_safetensors(&path).expect("fixture readable").into_iter().collect()
}

fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(tch::Kind::Float)).unwrap()
}

/// Max |a - b| / max |b|.
fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let diff = (a - b).abs().max().double_value(&[]);
    diff / b.abs().max().double_value(&[]).max(1e-12)
}

fn check(name: &str, mut s: Box<dyn Sampler>, fx: &HashMap<String, Tensor>) {
    // Schedules are computed exactly like the reference (float64 then float32): 1e-6 relative.
    let ts = floats(&fx[&format!("{name}.timesteps")]);
    let sig = floats(&fx[&format!("{name}.sigmas")]);
    assert_eq!(s.timesteps().len(), ts.len(), "{name}: step count");
    for (i, (a, b)) in s.timesteps().iter().zip(&ts).enumerate() {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{name}: timestep {i}: {a} vs {b}");
    }
    for (i, (a, b)) in s.sigmas().iter().zip(&sig).enumerate() {
        assert!((a - b).abs() <= 1e-6, "{name}: sigma {i}: {a} vs {b}");
    }
    // Per-step outputs: tolerance 1e-5 relative (coefficients in float64 vs reference float32).
    let mut sample = fx[&format!("{name}.sample0")].shallow_clone();
    for i in 0..ts.len() {
        let mo = &fx[&format!("{name}.model_output.{i}")];
        sample = s.step(mo, &sample).unwrap();
        let want = &fx[&format!("{name}.sample.{}", i + 1)];
        let e = rel_err(&sample, want);
        assert!(e < 1e-5, "{name}: step {i} relative error {e}");
    }
    assert!(s.step(&sample, &sample).is_err(), "{name}: stepping past the end must fail");
}

#[test]
fn unipc_matches_diffusers() {
    let fx = fixtures();
    check("unipc", Box::new(UniPc::new(UniPcConfig { flow_shift: 3.0, ..Default::default() }, 6)), &fx);
}

#[test]
fn euler_matches_diffusers() {
    let fx = fixtures();
    check("euler", Box::new(FlowMatchEuler::new(5, 5.0)), &fx);
}

/// Flow-GRPO's SDE step (fixture: a reference written against diffusers'
/// FlowMatchEulerDiscreteScheduler in make_fixtures.py, `sde.safetensors`): per step, the
/// transition's mean and std, the next sample from given noise, and its log-probability.
/// Tolerance 1e-5 (relative for mean and sample, absolute for std and log-prob): both sides are
/// float32; ours computes the scalar coefficients in f32 too.
#[test]
fn flow_sde_steps_match_flow_grpo_reference() {
    use fastvideo_pipeline::sampler::{flow_sde_step, SdeDraw};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sde.safetensors");
    let fx: HashMap<String, Tensor> = Tensor::read_safetensors(&path).expect("fixture readable").into_iter().collect();
    let ours = FlowMatchEuler::new(6, 3.0);
    let sig = floats(&fx["sigmas"]);
    for (i, (a, b)) in ours.sigmas().iter().zip(&sig).enumerate() {
        assert!((a - b).abs() <= 1e-6, "sigma {i}: {a} vs {b}");
    }
    let a = floats(&fx["noise_level"])[0];
    let mut sample = fx["sample.0"].shallow_clone();
    for i in 0..6 {
        let mo = &fx[&format!("model_output.{i}")];
        let noise = &fx[&format!("noise.{i}")];
        let s = ours.sigmas();
        let out = flow_sde_step(mo, &sample, s[i], s[i + 1], s[1], a, SdeDraw::Noise(noise));
        let mean_err = rel_err(&out.mean, &fx[&format!("mean.{i}")]);
        assert!(mean_err < 1e-5, "step {i}: mean relative error {mean_err}");
        let std = floats(&fx[&format!("std.{i}")])[0];
        assert!((out.std - std).abs() < 1e-5 * std.max(1.0), "step {i}: std {} vs {std}", out.std);
        let lp = floats(&fx[&format!("log_prob.{i}")])[0];
        let got = out.log_prob.double_value(&[0]) as f32;
        assert!((got - lp).abs() < 1e-5 * lp.abs().max(1.0), "step {i}: log-prob {got} vs {lp}");
        let want = &fx[&format!("sample.{}", i + 1)];
        let e = rel_err(&out.sample, want);
        assert!(e < 1e-5, "step {i}: sample relative error {e}");
        // Scoring the sample taken (the trainer's recomputation) gives the same log-probability.
        let again = flow_sde_step(mo, &sample, s[i], s[i + 1], s[1], a, SdeDraw::Given(want));
        let lp2 = again.log_prob.double_value(&[0]) as f32;
        assert!((lp2 - lp).abs() < 1e-5 * lp.abs().max(1.0), "step {i}: rescored log-prob {lp2} vs {lp}");
        sample = want.shallow_clone();
    }
}

/// The `flow_sde` sampler: the steps not chosen are Euler's exactly, the chosen ones report a
/// log-probability each, and the same seed draws the same noise.
#[test]
fn flow_sde_sampler_mixes_ode_and_sde_steps() {
    use fastvideo_pipeline::sampler::FlowSde;
    let fx = fixtures();
    let x0 = fx["euler.sample0"].shallow_clone();
    let run = |sde: &[u32], seed: u64| {
        let mut s = FlowSde::new(5, 5.0, 0.7, sde, seed);
        let mut e = FlowMatchEuler::new(5, 5.0);
        let mut x = x0.shallow_clone();
        let mut ode_match = Vec::new();
        for i in 0..5 {
            let mo = &fx[&format!("euler.model_output.{i}")];
            let next = s.step(mo, &x).unwrap();
            let euler = e.step(mo, &x).unwrap();
            ode_match.push(rel_err(&next, &euler) == 0.0);
            x = next;
        }
        (x, s.log_probs().to_vec(), ode_match)
    };
    let (xa, lpa, ode) = run(&[1, 3], 9);
    assert_eq!(ode, [true, false, true, false, true], "only steps 1 and 3 are stochastic");
    assert_eq!(lpa.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 3]);
    assert!(lpa.iter().all(|(_, p)| p.is_finite()));
    let (xb, lpb, _) = run(&[1, 3], 9);
    assert_eq!(rel_err(&xa, &xb), 0.0, "same seed, same sample");
    assert_eq!(lpa, lpb);
    let (xc, _, _) = run(&[1, 3], 10);
    assert!(rel_err(&xa, &xc) > 1e-3, "another seed draws other noise");
}

fn few_step_fixtures() -> HashMap<String, Tensor> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/few_step_samplers.safetensors");
    Tensor::read_safetensors(&path).expect("fixture readable").into_iter().collect()
}

/// The 4-step distilled schedule (tests/fixtures/make_few_step_fixtures.py): base sigmas
/// [1, 0.75, 0.5, 0.25] (`--timesteps 1000,750,500,250`), shift 5.
const LIST: [f64; 4] = [1.0, 0.75, 0.5, 0.25];

/// An explicit schedule through each solver, as diffusers' `set_timesteps(sigmas=…)`
/// (tolerances as [`check`]: schedules 1e-6, steps 1e-5 relative).
#[test]
fn explicit_schedules_match_diffusers() {
    let fx = few_step_fixtures();
    check("euler_list", Box::new(FlowMatchEuler::with_base_sigmas(&LIST, 5.0)), &fx);
    let unipc = UniPcConfig { flow_shift: 5.0, ..Default::default() };
    check("unipc_list", Box::new(UniPc::with_base_sigmas(unipc, LIST.to_vec())), &fx);
}

/// The DMD/LCM sampler (x0, then fresh noise to the next level) against diffusers'
/// `FlowMatchLCMScheduler`, fed the noise diffusers drew: over the explicit list, and over the
/// scheduler's own spacing (which is Euler's).
#[test]
fn dmd_matches_diffusers_flow_match_lcm() {
    let fx = few_step_fixtures();
    let noise_of = |name: &'static str| -> StepNoise {
        let fx = few_step_fixtures();
        Box::new(move |i, _shape, _dev| fx[&format!("{name}.noise.{i}")].shallow_clone())
    };
    check("dmd_list", Box::new(Dmd::with_noise(&LIST, 5.0, noise_of("dmd_list"))), &fx);
    let euler = FlowMatchEuler::new(6, 3.0);
    let base: Vec<f64> = euler.sigmas()[..6].iter().map(|&s| s as f64).collect();
    // The default spacing's sigmas are final (already shifted): shift 1 keeps them.
    check("dmd_default", Box::new(Dmd::with_noise(&base, 1.0, noise_of("dmd_default"))), &fx);
}

/// The request path: `diffusion.timesteps` resolves to the base levels every solver takes,
/// and a model's list applies when the request gives no count.
#[test]
fn a_requests_timesteps_build_the_distilled_schedule() {
    use fastvideo_request::{ModelLimits, OmniRequest, SamplerKind};
    let mut limits = ModelLimits::example();
    let resolve = |r: &OmniRequest, l: &ModelLimits| r.resolve(l, || 5).map_err(|e| e.to_string());
    let mut r = OmniRequest::text_to_video("r", "a red circle");
    r.diffusion.timesteps = Some(vec![1000.0, 750.0, 500.0, 250.0]);
    r.diffusion.shift = Some(5.0);
    r.sampling.sampler = Some(SamplerKind::Euler);
    let req = resolve(&r, &limits).unwrap();
    assert_eq!((req.steps, req.schedule.as_deref()), (4, Some(&LIST[..])));
    let s = fastvideo_pipeline::sampler::build(&req);
    assert_eq!(s.timesteps(), [1000.0, 937.5, 833.3333, 625.0]);
    // The model's list: used without a count, or with its own count; another count spaces evenly.
    limits.defaults.timesteps = Some(vec![1000.0, 750.0, 500.0, 250.0]);
    let plain = OmniRequest::text_to_video("r", "a red circle");
    assert_eq!(resolve(&plain, &limits).unwrap().schedule.as_deref(), Some(&LIST[..]));
    let mut eight = plain.clone();
    eight.diffusion.num_inference_steps = Some(8);
    assert_eq!(resolve(&eight, &limits).unwrap().schedule, None);
    // Refusals name the field.
    let mut bad = OmniRequest::text_to_video("r", "a red circle");
    bad.diffusion.timesteps = Some(vec![1000.0, 1000.0]);
    assert!(resolve(&bad, &limits).unwrap_err().contains("diffusion.timesteps[1]"));
    bad.diffusion.timesteps = Some(vec![1200.0]);
    assert!(resolve(&bad, &limits).unwrap_err().contains("outside (0, 1000]"));
    bad.diffusion.timesteps = Some(vec![1000.0, 500.0]);
    bad.diffusion.num_inference_steps = Some(3);
    assert!(resolve(&bad, &limits).unwrap_err().contains("disagrees with the 2 entries"));
    bad.diffusion.sigmas = Some(vec![1.0]);
    assert!(resolve(&bad, &limits).unwrap_err().contains("not both"));
}

/// rCM's consistency sampling against TurboDiffusion's loop (written out in float64 by the
/// fixture script: there is no diffusers scheduler for it), fed the same noise: the levels a
/// request resolves for `sampler: rcm` (sigma_max 80, 4 steps), the initial noise scaled by the
/// first, and every step (tolerances as [`check`]).
#[test]
fn rcm_matches_turbodiffusions_loop() {
    use fastvideo_request::{ModelLimits, OmniRequest, SamplerKind};
    let fx = few_step_fixtures();
    let mut r = OmniRequest::text_to_video("r", "a red circle");
    r.sampling.sampler = Some(SamplerKind::Rcm);
    r.diffusion.num_inference_steps = Some(4);
    let req = r.resolve(&ModelLimits::example(), || 5).unwrap();
    let levels = req.schedule.clone().unwrap();
    let noise: StepNoise = {
        let fx = few_step_fixtures();
        Box::new(move |i, _shape, _dev| fx[&format!("rcm.noise.{i}")].shallow_clone())
    };
    let s = Dmd::consistency(&levels, noise);
    let scaled = &fx["rcm.noise0"] * s.initial_noise_scale();
    assert!(rel_err(&scaled, &fx["rcm.sample0"]) < 1e-6);
    check("rcm", Box::new(s), &fx);
    // Its own schedule only, 1 to 4 steps, and `sigma_max` for it alone.
    r.diffusion.num_inference_steps = Some(5);
    assert!(r.resolve(&ModelLimits::example(), || 5).unwrap_err().to_string().contains("1 to 4 steps"));
    r.diffusion.num_inference_steps = Some(2);
    r.diffusion.timesteps = Some(vec![1000.0, 500.0]);
    assert!(r.resolve(&ModelLimits::example(), || 5).unwrap_err().to_string().contains("makes its own schedule"));
    let mut euler = OmniRequest::text_to_video("r", "a red circle");
    euler.sampling.sigma_max = Some(200.0);
    assert!(euler.resolve(&ModelLimits::example(), || 5).unwrap_err().to_string().contains("sampling.sigma_max"));
}
