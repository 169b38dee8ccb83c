//! Shared by the plugin tests (and, through `#[path]`, the bench): the first-party plugins built
//! once per test binary, and deploys of one plugin pinned by its real hash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fastvideo_plugin_host::{build_plugins, inspect, DeployConfig, Deployment, PluginError};
use fastvideo_request::{ModelLimits, OmniRequest, ResolvedRequest, TaskType};
use fastvideo_wan::WanModel;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn plugins() -> &'static BTreeMap<String, PathBuf> {
    static P: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    P.get_or_init(|| build_plugins(&repo().join("plugins")).expect("first-party plugins build"))
}

pub fn wasm(stem: &str) -> Vec<u8> {
    std::fs::read(&plugins()[stem]).unwrap()
}

/// A deploy of one plugin from `plugins/`, pinned by its real hash; `limits` is TOML.
pub fn deploy(stem: &str, name: &str, grants: &[&str], limits: &str) -> Result<Deployment, PluginError> {
    deploy_with_params(stem, name, grants, limits, "{}")
}

/// [`deploy`] with the plugin's deploy-default `params` (a TOML inline table).
pub fn deploy_with_params(
    stem: &str,
    name: &str,
    grants: &[&str],
    limits: &str,
    params: &str,
) -> Result<Deployment, PluginError> {
    let path = &plugins()[stem];
    let toml = format!(
        "[limits]\n{limits}\n[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{}\"\ngrants = {:?}\nparams = {params}\n",
        path.display(),
        inspect(&wasm(stem)).unwrap().blake3,
        grants
    );
    let cfg: DeployConfig = toml::from_str(&toml).unwrap();
    Deployment::from_config(cfg, Path::new("/"))
}

/// Wan-shaped request limits with the default model's defaults, for requests built without a
/// model (guider and bench inputs are synthetic tensors).
pub fn limits() -> ModelLimits {
    ModelLimits { tasks: vec![TaskType::T2v], ..ModelLimits::example() }
}

/// The tiny reference Wan model (`tests/fixtures/tiny-wan`), loaded once per test binary.
pub fn tiny_wan() -> &'static WanModel {
    static M: OnceLock<WanModel> = OnceLock::new();
    M.get_or_init(|| WanModel::load(&repo().join("tests/fixtures/tiny-wan"), tch::Device::Cpu).unwrap())
}

/// A small text-to-video request for the tiny model: 32×32, 5 frames, guidance 5, CFG on.
pub fn tiny_request(prompt: &str, steps: u32, seed: u64) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("plugin-test", prompt);
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(5);
    r.diffusion.num_inference_steps = Some(steps);
    r.diffusion.guidance_scale = Some(5.0);
    r.sampling.seed = Some(seed);
    r
}

/// `r` resolved against the tiny model's limits, with `params` for plugin `name` if given.
pub fn resolve_tiny(mut r: OmniRequest, plugin: Option<(&str, serde_json::Value)>) -> ResolvedRequest {
    if let Some((name, params)) = plugin {
        r.plugin_params.insert(name.into(), params);
    }
    r.resolve(&tiny_wan().limits(), || 0).unwrap()
}

/// The blake3 a deploy pins plugin `stem` by.
pub fn inspect_blake3(stem: &str) -> String {
    inspect(&wasm(stem)).unwrap().blake3
}
