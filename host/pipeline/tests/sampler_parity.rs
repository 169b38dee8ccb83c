//! Sampler parity against diffusers (fixtures: tests/fixtures/make_fixtures.py,
//! `samplers.safetensors`): timesteps, sigmas and every step's output.

use std::collections::HashMap;
use std::path::Path;

use fastvideo_pipeline::sampler::{FlowMatchEuler, Sampler, UniPc, UniPcConfig};
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
