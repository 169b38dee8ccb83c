//! The second guest language: a Python guider (`plugins/python/cfg`) built with componentize-py
//! (installed from PyPI into .venv-client by host/scripts/client-venv.sh), given its manifest
//! with `embed_manifest`, audited, deployed by hash and run on the Wan pipeline, where it gives
//! the built-in CFG's output bit for bit. A Python exception reaches the request as an error
//! naming the plugin and hook.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::common::repo;
use fastvideo_pipeline::{Guidance, PipelineRun, Values};
use fastvideo_plugin_host::{
    embed_manifest, inspect, DeployConfig, Deployment, FailureKind, PluginError, PluginGuider, PluginKind,
};
use fastvideo_request::ResolvedRequest;
use fastvideo_wan::{pipeline, WanModel};
use tch::Device;

fn model() -> &'static WanModel {
    common::tiny_wan()
}

fn componentize_py() -> PathBuf {
    let p = std::env::var_os("FASTVIDEO_COMPONENTIZE_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv-client/bin/componentize-py"));
    assert!(
        p.exists(),
        "{} is missing: run `bash host/scripts/client-venv.sh` (host/scripts/test.sh does)",
        p.display()
    );
    p
}

/// The Python plugin, built once per test binary: (component bytes, path).
fn plugin() -> &'static (Vec<u8>, PathBuf) {
    static P: OnceLock<(Vec<u8>, PathBuf)> = OnceLock::new();
    P.get_or_init(|| {
        // Cargo's scratch folder for integration tests: reused by every run, nothing left in /tmp.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-guest");
        std::fs::create_dir_all(&dir).unwrap();
        let core = dir.join("cfg_py.core.wasm");
        let t = Instant::now();
        let out = Command::new(componentize_py())
            .args(["-d", "wit/fastvideo-plugin", "-w", "guider-plugin", "componentize", "--stub-wasi"])
            .args(["-p", "plugins/python/cfg", "cfg_guider", "-o"])
            .arg(&core)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "componentize-py: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("componentize-py built the plugin in {:.1}s", t.elapsed().as_secs_f64());
        let manifest = std::fs::read_to_string(repo().join("plugins/python/cfg/manifest.json")).unwrap();
        let component = embed_manifest(&std::fs::read(&core).unwrap(), &manifest).unwrap();
        let path = dir.join("cfg_py.wasm");
        std::fs::write(&path, &component).unwrap();
        (component, path)
    })
}

fn deploy() -> Deployment {
    let (bytes, path) = plugin();
    let toml = format!(
        "[limits]\ncall_deadline_ms = 2000\n[[plugins]]\nname = \"g\"\nsource = \"{}\"\nblake3 = \"{}\"\n\
         grants = [\"tensor\", \"tensor-ops\", \"tensor-read\", \"log\"]\n",
        path.display(),
        inspect(bytes).unwrap().blake3
    );
    let cfg: DeployConfig = toml::from_str(&toml).unwrap();
    let t = Instant::now();
    let d = Deployment::from_config(cfg, std::path::Path::new("/")).unwrap();
    eprintln!("compiled and linked in {:.1}s", t.elapsed().as_secs_f64());
    d
}

fn request(params: Option<serde_json::Value>) -> ResolvedRequest {
    let mut r = common::tiny_request("a purple triangle moving right on a white background", 3, 2);
    r.outputs.return_latents = true;
    common::resolve_tiny(r, params.map(|p| ("g", p)))
}

fn run(guidance: Arc<dyn Guidance>, req: ResolvedRequest) -> anyhow::Result<Vec<f32>> {
    let spec = Arc::new(pipeline::text_to_video(model(), guidance)?);
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {})?;
    match run.finish(&mut |_| {})?.artifacts.remove("latents") {
        Some(fastvideo_request::Artifact::Latents(l)) => Ok(l.data),
        _ => anyhow::bail!("no latents"),
    }
}

#[test]
fn python_cfg_guider_is_audited_and_matches_builtin_cfg_bit_for_bit() {
    let audit = inspect(&plugin().0).unwrap();
    assert_eq!(audit.manifest.name, "cfg-py");
    assert_eq!(audit.manifest.kind, PluginKind::Guider);
    assert!(
        audit.imports.iter().all(|i| i.starts_with("fastvideo:plugin/")),
        "--stub-wasi leaves no WASI imports: {:?}",
        audit.imports
    );
    let d = deploy();
    let g = d.of_kind(PluginKind::Guider).next().unwrap().clone();
    let t = Instant::now();
    let ours = run(Arc::new(PluginGuider::new(&d, g, "tiny-wan")), request(None)).unwrap();
    eprintln!("request with the Python guider: {:.2}s", t.elapsed().as_secs_f64());
    let builtin = run(pipeline::default_guidance(), request(None)).unwrap();
    assert_eq!(ours, builtin, "the same host ops in the same order: identical latents");

    // A Python exception (`raise Err(..)`) is the plugin's returned error, named.
    let g = d.of_kind(PluginKind::Guider).next().unwrap().clone();
    let err =
        run(Arc::new(PluginGuider::new(&d, g, "tiny-wan")), request(Some(serde_json::json!({"x": 1})))).unwrap_err();
    let e = err.chain().find_map(|c| c.downcast_ref::<PluginError>()).unwrap_or_else(|| panic!("{err:#}"));
    let PluginError::Call { plugin, hook, kind, message } = e else { panic!("{e}") };
    assert_eq!((plugin.as_str(), *hook, *kind), ("g", "init", FailureKind::Returned));
    assert!(message.contains("takes no parameters"), "{message}");
}
