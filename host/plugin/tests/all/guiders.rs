//! The first-party guiders against their papers' reference formulas (written here in torch,
//! double precision, following the authors' published code), step by step on random branch
//! predictions, through the real host. Tolerance: 1e-5 relative (fp32 host ops vs f64 reference).

use crate::common;

use std::sync::Arc;

use crate::common::deploy;
use fastvideo_pipeline::{Guidance, StepCtx};
use fastvideo_plugin_host::{PluginGuider, PluginKind};
use fastvideo_request::{OmniRequest, ResolvedRequest};
use tch::{Device, Kind, Tensor};

const TOL: f64 = 1e-5;

fn request(name: &str, params: serde_json::Value, scale: f32) -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video("guider-test", "a blue star moving up on a gray background");
    r.diffusion.guidance_scale = Some(scale);
    r.plugin_params.insert(name.into(), params);
    r.resolve(&common::limits(), || 0).unwrap()
}

fn guider(stem: &str, name: &str) -> Arc<dyn Guidance> {
    let d = deploy(stem, name, &["tensor", "tensor-ops"], "").unwrap();
    let g = d.of_kind(PluginKind::Guider).next().unwrap().clone();
    Arc::new(PluginGuider::new(&d, g, "test"))
}

/// Runs `steps` combines on seeded random [2, 4, 3, 5, 5] predictions; returns (ours, reference).
fn compare(
    g: &dyn Guidance,
    req: &ResolvedRequest,
    steps: u32,
    mut reference: impl FnMut(u32, &Tensor, &Tensor) -> Tensor,
) -> Vec<(Tensor, Tensor)> {
    tch::manual_seed(7);
    let mut plan = g.init(req, &Default::default()).unwrap();
    assert_eq!(plan.branches, vec!["cond", "uncond"]);
    (0..steps)
        .map(|i| {
            let c = Tensor::randn([2, 4, 3, 5, 5], (Kind::Float, Device::Cpu));
            let u = &c * 0.6 + Tensor::randn([2, 4, 3, 5, 5], (Kind::Float, Device::Cpu)) * 0.5;
            let ctx = StepCtx {
                request: req,
                step_index: i,
                num_steps: steps,
                timestep: 1000.0 - i as f32,
                sigma: 1.0,
                sigma_next: 0.9,
                expert: 0,
                guidance_scale: req.guidance_scale,
            };
            let ours = g.combine(&ctx, &[c.shallow_clone(), u.shallow_clone()], &mut plan.state).unwrap();
            let want = reference(i, &c.to_kind(Kind::Double), &u.to_kind(Kind::Double));
            (ours.to_kind(Kind::Double), want)
        })
        .collect()
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a - b).abs().max().double_value(&[]);
    d / b.abs().max().double_value(&[]).max(1e-12)
}

fn dims(t: &Tensor) -> Vec<i64> {
    (1..t.dim() as i64).collect()
}

#[test]
fn cfg_zero_star_matches_the_reference() {
    let s = 5.0;
    let req = request("cfgz", serde_json::json!({"zero_init_steps": 1}), s as f32);
    let g = guider("fastvideo_guider_cfg_zero_star", "cfgz");
    let out = compare(g.as_ref(), &req, 3, |i, c, u| {
        if i < 1 {
            return c * 0.0;
        }
        // optimized_scale: <c, u> / (|u|^2 + 1e-8) per sample.
        let d = dims(c);
        let dot = (c * u).sum_dim_intlist(d.as_slice(), true, Kind::Double);
        let nn = (u * u).sum_dim_intlist(d.as_slice(), true, Kind::Double) + 1e-8;
        let alpha = dot / nn;
        let ua = u * &alpha;
        &ua + (c - &ua) * s
    });
    assert_eq!(out[0].0.abs().max().double_value(&[]), 0.0, "zero-init step");
    for (i, (ours, want)) in out.iter().enumerate() {
        let e = rel(ours, want);
        assert!(e < TOL, "step {i}: relative error {e}");
    }
}

#[test]
fn apg_matches_the_reference_with_momentum_and_threshold() {
    let (s, eta, thr, momentum) = (6.0, 0.3, 20.0, -0.5);
    let params = serde_json::json!({"eta": eta, "norm_threshold": thr, "momentum": momentum});
    let req = request("apg", params, s as f32);
    let g = guider("fastvideo_guider_apg", "apg");
    let mut running: Option<Tensor> = None;
    let out = compare(g.as_ref(), &req, 4, |_, c, u| {
        let d = dims(c);
        let mut diff = c - u;
        // MomentumBuffer.update: running = diff + momentum * running (starting from 0).
        let avg = match &running {
            Some(r) => &diff + r * momentum,
            None => diff.shallow_clone(),
        };
        running = Some(avg.shallow_clone());
        diff = avg;
        let norm = diff.norm_scalaropt_dim(2.0, d.as_slice(), true);
        let factor = (norm.reciprocal() * thr).clamp_max(1.0);
        diff = &diff * factor;
        let unit = c / c.norm_scalaropt_dim(2.0, d.as_slice(), true).clamp_min(1e-12);
        let par = (&diff * &unit).sum_dim_intlist(d.as_slice(), true, Kind::Double) * &unit;
        let orth = &diff - &par;
        c + (orth + par * eta) * (s - 1.0)
    });
    for (i, (ours, want)) in out.iter().enumerate() {
        let e = rel(ours, want);
        assert!(e < TOL, "step {i}: relative error {e}");
    }
}

#[test]
fn guider_params_are_validated_before_any_work() {
    let d = deploy("fastvideo_guider_apg", "apg", &["tensor", "tensor-ops"], "").unwrap();
    let bad = request("apg", serde_json::json!({"momentum": 3.0}), 5.0);
    let e = d.check_request(&bad).unwrap_err().to_string();
    assert!(e.contains("plugin_params.apg") && e.contains("momentum"), "{e}");
}
