//! Guider plugins through the real host on the Wan pipeline (tiny reference model): the CFG
//! plugin reproduces the built-in CFG exactly, and every way a plugin can misbehave fails only
//! the request that ran it, with an error naming the plugin and hook.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use crate::common::{deploy, plugins, repo, wasm};

use fastvideo_pipeline::{Guidance, PipelineRun, Values};
use fastvideo_plugin_host::{inspect, Deployment, FailureKind, PluginError, PluginGuider, PluginInstance, PluginKind};
use fastvideo_request::ResolvedRequest;
use fastvideo_wan::{pipeline, WanModel};
use tch::{Device, Tensor};

fn model() -> &'static WanModel {
    common::tiny_wan()
}

fn request(params: Option<serde_json::Value>) -> ResolvedRequest {
    let r = common::tiny_request("a red circle moving left on a white background", 3, 11);
    common::resolve_tiny(r, params.map(|p| ("g", p)))
}

fn run(guidance: Arc<dyn Guidance>, req: ResolvedRequest) -> anyhow::Result<Vec<u8>> {
    let spec = Arc::new(pipeline::text_to_video(model(), guidance)?);
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {})?;
    Ok(run.finish(&mut |_| {})?.video().unwrap().rgb.clone())
}

fn guider(d: &Deployment) -> Arc<dyn Guidance> {
    let g = d.of_kind(PluginKind::Guider).next().unwrap().clone();
    Arc::new(PluginGuider::new(d, g, "tiny-wan"))
}

#[test]
fn cfg_plugin_matches_builtin_cfg() {
    let d = deploy("fastvideo_guider_cfg", "g", &["tensor", "tensor-ops"], "").unwrap();
    let ours = run(guider(&d), request(None)).unwrap();
    let builtin = run(pipeline::default_guidance(), request(None)).unwrap();
    // The plugin runs the built-in policy's ops in its order: bit-identical.
    assert_eq!(ours, builtin);
}

#[test]
fn audit_reads_the_manifest_and_capabilities_without_running() {
    let a = inspect(&wasm("fastvideo_guider_cfg")).unwrap();
    assert_eq!(a.manifest.name, "cfg");
    assert_eq!(a.manifest.kind, PluginKind::Guider);
    assert_eq!(a.manifest.hooks, vec!["combine"]);
    assert!(!a.manifest.distribution_altering);
    assert_eq!(a.capabilities, vec!["tensor", "tensor-ops"], "imports: {:?}", a.imports);
    assert!(a.exports.contains(&"fastvideo:plugin/guider@0.1.5".to_string()));
    assert!(a.imports.iter().all(|i| !i.starts_with("wasi:")), "no WASI: {:?}", a.imports);

    // Capabilities come from the component's import section, never from what its manifest
    // says: misbehave's manifest mentions no imports, its audit still lists `log`, and a
    // manifest that tries to declare imports itself is refused.
    let m = inspect(&wasm("fastvideo_testing_misbehave")).unwrap();
    assert_eq!(m.capabilities, vec!["tensor", "tensor-ops", "log"]);
    let lying = r#"{"name":"cfg","version":"0.1.0","kind":"guider","hooks":["combine"],"wit":"0.1.1","imports":[]}"#;
    let e = inspect(&with_manifest(wasm("fastvideo_guider_cfg"), lying)).unwrap_err().to_string();
    assert!(e.contains("unknown field `imports`"), "{e}");
}

/// Appends a second manifest section (the later one wins).
fn with_manifest(mut bytes: Vec<u8>, manifest: &str) -> Vec<u8> {
    let name = b"fastvideo-manifest";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(manifest.as_bytes());
    bytes.push(0);
    bytes.push(payload.len() as u8); // < 128: a one-byte LEB128
    bytes.extend_from_slice(&payload);
    bytes
}

#[test]
fn deploy_refuses_missing_grants_bad_hash_and_unknown_hooks() {
    let e = deploy("fastvideo_guider_cfg", "g", &["tensor"], "").err().unwrap().to_string();
    assert!(e.contains("`g`") && e.contains("not granted: tensor-ops"), "{e}");

    let path = &plugins()["fastvideo_guider_cfg"];
    let toml = format!(
        "[[plugins]]\nname = \"g\"\nsource = \"{}\"\nblake3 = \"{}\"\ngrants = [\"tensor\", \"tensor-ops\"]\n",
        path.display(),
        "0".repeat(64)
    );
    let e = Deployment::from_config(toml::from_str(&toml).unwrap(), Path::new("/")).err().unwrap().to_string();
    assert!(e.contains("`g`") && e.contains("blake3"), "{e}");

    // A manifest that names a hook guiders do not have (a later custom section wins).
    let manifest = r#"{"name":"cfg","version":"0.1.0","kind":"guider","hooks":["after-block"],"wit":"0.1.1"}"#;
    let e = inspect(&with_manifest(wasm("fastvideo_guider_cfg"), manifest)).unwrap_err().to_string();
    assert!(e.contains("unknown hook `after-block`"), "{e}");
}

fn failing(mode: &str, limits: &str) -> PluginError {
    let d = deploy("fastvideo_testing_misbehave", "g", &["tensor", "tensor-ops", "log"], limits).unwrap();
    let err = run(guider(&d), request(Some(serde_json::json!({ "mode": mode })))).unwrap_err();
    // The error travels through the pipeline as anyhow; find the plugin error inside.
    let e = err.chain().find_map(|c| c.downcast_ref::<PluginError>()).unwrap_or_else(|| panic!("{err:#}"));
    match e {
        PluginError::Call { plugin, hook, kind, message } => {
            PluginError::Call { plugin: plugin.clone(), hook, kind: *kind, message: message.clone() }
        }
        other => panic!("{other}"),
    }
}

fn kind(e: &PluginError) -> FailureKind {
    match e {
        PluginError::Call { kind, plugin, hook, .. } => {
            assert_eq!((plugin.as_str(), *hook), ("g", "combine"));
            *kind
        }
        other => panic!("{other}"),
    }
}

#[test]
fn misbehaving_plugins_fail_their_request_with_a_structured_error() {
    assert_eq!(kind(&failing("trap", "")), FailureKind::Trap);
    assert_eq!(kind(&failing("hang", "call_deadline_ms = 20")), FailureKind::Timeout);
    let shape = failing("shape", "");
    assert_eq!(kind(&shape), FailureKind::Invalid);
    assert!(shape.to_string().contains("shape"), "{shape}");
    let memory = failing("memory", "memory_bytes = 8388608");
    assert_eq!(kind(&memory), FailureKind::Memory);
    let handles = failing("handles", "max_tensor_handles = 16");
    assert_eq!(kind(&handles), FailureKind::Invalid);
    assert!(handles.to_string().contains("16 tensor handles"), "{handles}");
    let returned = failing("error", "");
    assert_eq!(kind(&returned), FailureKind::Returned);
    assert!(returned.to_string().contains("refusing on purpose"), "{returned}");
}

#[test]
fn a_plugin_over_its_per_request_budget_fails_that_request_alone() {
    // `slow` spends milliseconds per call, each under the 50 ms call deadline; together they
    // pass a 2 ms budget within the first calls.
    // The budget counts every call, `init` included: on a loaded machine `init` alone can pass
    // 2 ms, so the failing hook is `init` or `combine`, whichever crossed the line.
    let e = failing("slow", "max_plugin_ms_per_request = 2");
    match &e {
        PluginError::Call { plugin, hook, kind, .. } => {
            assert_eq!(plugin, "g");
            assert!(matches!(*hook, "init" | "combine"), "{hook}");
            assert_eq!(*kind, FailureKind::Budget);
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("plugin budget of 2 ms"), "{e}");
    // A hang stops at what is left of the budget (30 ms), before the 50 ms call deadline; the
    // next request on the same runtime has a budget of its own, and nothing is left behind.
    let limits = "max_plugin_ms_per_request = 30";
    let d = deploy("fastvideo_testing_misbehave", "g", &["tensor", "tensor-ops", "log"], limits).unwrap();
    let g = guider(&d);
    let err = run(g.clone(), request(Some(serde_json::json!({"mode": "hang"})))).unwrap_err();
    assert!(format!("{err:#}").contains("plugin budget of 30 ms"), "{err:#}");
    run(g.clone(), request(Some(serde_json::json!({"mode": "ok"})))).unwrap();
    // The default budget (10 s) leaves normal requests alone.
    let d = deploy("fastvideo_testing_misbehave", "g", &["tensor", "tensor-ops", "log"], "").unwrap();
    run(guider(&d), request(Some(serde_json::json!({"mode": "slow"})))).unwrap();
}

#[test]
fn a_failed_request_leaves_other_requests_untouched() {
    let d = deploy("fastvideo_testing_misbehave", "g", &["tensor", "tensor-ops", "log"], "").unwrap();
    let g = guider(&d);
    let good = run(g.clone(), request(Some(serde_json::json!({"mode": "ok"})))).unwrap();
    assert!(run(g.clone(), request(Some(serde_json::json!({"mode": "trap"})))).is_err());
    assert_eq!(run(g.clone(), request(Some(serde_json::json!({"mode": "ok"})))).unwrap(), good);
    // Globals start fresh: `count` fails if init ever ran twice in one instance.
    for _ in 0..3 {
        run(g.clone(), request(Some(serde_json::json!({"mode": "count"})))).unwrap();
    }
}

#[test]
fn log_spam_is_capped_and_its_request_completes() {
    let d = deploy(
        "fastvideo_testing_misbehave",
        "g",
        &["tensor", "tensor-ops", "log"],
        "max_log_lines = 50\ncall_deadline_ms = 10000",
    )
    .unwrap();
    let g = guider(&d);
    let ok = run(g.clone(), request(Some(serde_json::json!({"mode": "ok"})))).unwrap();
    assert_eq!(run(g.clone(), request(Some(serde_json::json!({"mode": "spam"})))).unwrap(), ok);
    // One combine on one instance: 50 lines kept, the rest counted as dropped.
    let req = request(Some(serde_json::json!({"mode": "spam"})));
    let mut plan = g.init(&req, &Default::default()).unwrap();
    let t = Tensor::ones([1, 4], (tch::Kind::Float, Device::Cpu));
    let ctx = fastvideo_pipeline::StepCtx {
        request: &req,
        step_index: 0,
        num_steps: 1,
        timestep: 999.0,
        sigma: 1.0,
        sigma_next: 0.0,
        expert: 0,
        guidance_scale: req.guidance_scale,
    };
    let _guided = g.combine(&ctx, &[t.shallow_clone(), t.shallow_clone()], &mut plan.state).unwrap();
    let inst = plan.state.0.downcast_mut::<PluginInstance>().unwrap();
    let counts = inst.state().output_counts();
    assert_eq!((counts.log_lines, counts.dropped_log_lines), (50, 20_000 - 50));
}

#[test]
fn parameters_are_checked_against_the_schema_and_exact_mode() {
    let d = deploy("fastvideo_testing_misbehave", "g", &["tensor", "tensor-ops", "log"], "").unwrap();
    let e = d.check_request(&request(Some(serde_json::json!({"mode": "sideways"})))).unwrap_err().to_string();
    assert!(e.contains("plugin_params.g") && e.contains("mode"), "{e}");
    let e = d.check_request(&request(Some(serde_json::json!({"speed": 2})))).unwrap_err().to_string();
    assert!(e.contains("plugin_params.g") && e.contains("speed"), "{e}");
    let mut exact = request(Some(serde_json::json!({"mode": "ok"})));
    exact.exact = true;
    let e = d.check_request(&exact).unwrap_err().to_string();
    assert!(e.contains("exact request runs without it"), "{e}");
    let mut other = request(None);
    other.plugin_params.insert("nope".into(), serde_json::json!({}));
    assert!(d.check_request(&other).unwrap_err().to_string().contains("no plugin of that name"));
}

#[test]
fn plugin_tensor_ops_match_torch() {
    // The host ops a guider uses, against tch directly, through one instance's store.
    let d = deploy("fastvideo_guider_cfg", "g", &["tensor", "tensor-ops"], "").unwrap();
    let mut inst = d.runtime.instantiate(&d.plugins[0].plugin).unwrap();
    let a = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 4.0]).view([2, 2]);
    let b = Tensor::from_slice(&[0.5f32, 0.5, -1.0, 2.0]).view([2, 2]);
    use fastvideo_plugin_host::bindings::fastvideo::plugin::tensor;
    use fastvideo_plugin_host::bindings::fastvideo::plugin::tensor_ops::Host as _;
    let s = inst.state();
    let (ha, hb) = (s.push(a.shallow_clone()).unwrap(), s.push(b.shallow_clone()).unwrap());
    let (ha2, hb2) = (s.push(a.shallow_clone()).unwrap(), s.push(b.shallow_clone()).unwrap());
    let lc = s.linear_combination(vec![ha2, hb2], vec![2.0, -1.0]).unwrap().unwrap();
    assert!(s.get(&lc).unwrap().allclose(&(&a * 2.0 - &b), 1e-6, 1e-6, false));
    let (ha3, hb3) = (s.push(a.shallow_clone()).unwrap(), s.push(b.shallow_clone()).unwrap());
    let r = s.relative_l1(ha3, hb3).unwrap().unwrap() as f64;
    let want =
        (&a - &b).abs().mean(tch::Kind::Float).double_value(&[]) / b.abs().mean(tch::Kind::Float).double_value(&[]);
    assert!((r - want).abs() < 1e-6, "{r} vs {want}");
    let bad = s.push(Tensor::zeros([3], (tch::Kind::Float, Device::Cpu))).unwrap();
    let e = s.add(ha, bad).unwrap().unwrap_err();
    assert!(e.starts_with("add:"), "{e}");
    // Handles the plugin drops come back out of the table.
    let before = s.live_handles();
    tensor::HostTensor::drop(s, hb).unwrap();
    assert_eq!(s.live_handles(), before - 1);
}

/// Versioning: `tests/fixtures/plugins/cfg-wit-0.1.0.wasm` is classic CFG built against the
/// frozen WIT 0.1.0 (`wit/since-v0.1.0`; rebuilt by the script beside it). Today's host is
/// generated from the newest WIT (0.1.5); wasmtime's semver-aware linking maps the old imports and exports onto
/// it, so the old plugin loads, audits as 0.1.0 and matches built-in CFG bit for bit.
#[test]
fn a_plugin_built_for_the_previous_wit_version_still_loads_and_runs() {
    let path = repo().join("tests/fixtures/plugins/cfg-wit-0.1.0.wasm");
    let bytes = std::fs::read(&path).unwrap();
    let audit = inspect(&bytes).unwrap();
    assert_eq!(audit.manifest.wit, "0.1.0");
    assert!(audit.exports.contains(&"fastvideo:plugin/guider@0.1.0".to_string()), "{:?}", audit.exports);
    let toml = format!(
        "[[plugins]]\nname = \"g\"\nsource = \"{}\"\nblake3 = \"{}\"\ngrants = [\"tensor\", \"tensor-ops\"]\n",
        path.display(),
        audit.blake3
    );
    let d = Deployment::from_config(toml::from_str(&toml).unwrap(), Path::new("/")).unwrap();
    let old = run(guider(&d), request(None)).unwrap();
    assert_eq!(old, run(pipeline::default_guidance(), request(None)).unwrap());
}
