//! What a plugin costs in the hot loop: instantiating per request, one guider `combine` (two
//! handles in, three host ops, one handle out) against the native CFG on the same tensors, an
//! observer's step-end call (NaNWatch: one host reduction), an event the observer did not list
//! (no call at all), and a step interceptor's before/after pair on a computed step (TaylorSeer).
//! Prints figures; asserts nothing.
//!
//!     cargo bench -p fastvideo-plugin-host --bench hook_call
//!
//! Env: FASTVIDEO_BENCH_ITERS (default 2000), FASTVIDEO_BENCH_NUMEL (latent elements, default
//! 16*5*8*8 = the default model's latents).

#[path = "../tests/all/common/mod.rs"]
#[allow(dead_code)] // the bench uses a few of the tests' helpers
mod common;

use std::sync::Arc;
use std::time::Instant;

use fastvideo_pipeline::{ClassicCfg, Guidance, Observed, Observer, StepCtx, StepPolicy};
use fastvideo_plugin_host::{PluginGuider, PluginKind, PluginObserver, PluginStepPolicy};
use fastvideo_request::OmniRequest;
use tch::{Device, Kind, Tensor};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let iters = env("FASTVIDEO_BENCH_ITERS", 2000);
    let numel = env("FASTVIDEO_BENCH_NUMEL", 16 * 5 * 8 * 8) as i64;
    common::plugins(); // build first: the load figure is hash + audit + compile + link
    let t0 = Instant::now();
    let deploy = common::deploy("fastvideo_guider_cfg", "cfg", &["tensor", "tensor-ops"], "").unwrap();
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let plugin = deploy.of_kind(PluginKind::Guider).next().unwrap().clone();
    let req = OmniRequest::text_to_video("bench", "a red circle").resolve(&common::limits(), || 0).unwrap();

    // Instantiate per request (pooling allocator, pre-linked component).
    let t0 = Instant::now();
    for _ in 0..iters {
        let inst = deploy.runtime.instantiate(&plugin.plugin).unwrap();
        std::hint::black_box(inst);
    }
    let inst_us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;

    let c = Tensor::randn([1, numel], (Kind::Float, Device::Cpu));
    let u = Tensor::randn([1, numel], (Kind::Float, Device::Cpu));
    let ctx = StepCtx {
        request: &req,
        step_index: 1,
        num_steps: 20,
        timestep: 900.0,
        sigma: 0.9,
        sigma_next: 0.8,
        expert: 0,
        guidance_scale: req.guidance_scale,
    };
    let time = |g: &dyn Guidance| {
        let mut plan = g.init(&req, &Default::default()).unwrap();
        for _ in 0..100 {
            let _ = g.combine(&ctx, &[c.shallow_clone(), u.shallow_clone()], &mut plan.state).unwrap();
        }
        let t0 = Instant::now();
        for _ in 0..iters {
            let _ = std::hint::black_box(
                g.combine(&ctx, &[c.shallow_clone(), u.shallow_clone()], &mut plan.state).unwrap(),
            );
        }
        t0.elapsed().as_secs_f64() * 1e6 / iters as f64
    };
    let plugin_guider = Arc::new(PluginGuider::new(&deploy, plugin.clone(), "bench"));
    let plugin_us = time(plugin_guider.as_ref());
    let native_us = time(&ClassicCfg);
    let per_call = |f: &mut dyn FnMut()| {
        for _ in 0..100 {
            f();
        }
        let t0 = Instant::now();
        for _ in 0..iters {
            f();
        }
        t0.elapsed().as_secs_f64() * 1e6 / iters as f64
    };
    let watch =
        common::deploy("fastvideo_observer_nanwatch", "nanwatch", &["tensor", "tensor-ops", "events"], "").unwrap();
    let nan = PluginObserver::new(&watch, watch.of_kind(PluginKind::Observer).next().unwrap().clone(), "bench");
    let mut nan_state = nan.init(&req, &Default::default()).unwrap();
    let step_end_us = per_call(&mut || nan_state.on_event(Observed::StepEnd(&ctx), Some(&c), &mut |_| {}).unwrap());
    let unlisted_us = per_call(&mut || nan_state.on_event(Observed::NodeStart("denoise"), None, &mut |_| {}).unwrap());
    let seer = common::deploy("fastvideo_cache_taylorseer", "seer", &["tensor", "tensor-ops", "events"], "").unwrap();
    let seer = PluginStepPolicy::new(&seer, seer.of_kind(PluginKind::StepInterceptor).next().unwrap().clone(), "b");
    let mut seer_state = seer.init(&req, &Default::default()).unwrap();
    // Step 1 is inside the warmup: before-step answers "compute", after-step updates f and f'.
    let seer_us = per_call(&mut || {
        assert!(seer_state.before_step(&ctx, &c).unwrap().is_none());
        seer_state.after_step(&ctx, &u).unwrap();
    });
    println!("plugin load (hash, audit, compile, link): {load_ms:.1} ms");
    println!("instantiate per request:                  {inst_us:.1} us");
    println!("guider combine, {numel} elements:");
    println!("  native ClassicCfg:                      {native_us:.1} us");
    println!("  cfg plugin (wasm + host op):            {plugin_us:.1} us");
    println!("  plugin overhead per step:               {:.1} us", plugin_us - native_us);
    println!("observer (NaNWatch) step-end call:        {step_end_us:.1} us");
    println!("observer, event it did not list:          {:.3} us", unlisted_us);
    println!("step interceptor (TaylorSeer) before+after, computed step: {seer_us:.1} us");
}
