//! A folder laid out like a published diffusers checkpoint loads as it is: every component
//! stored in bf16 and sharded behind a `*.safetensors.index.json`, configs carrying the keys
//! other diffusers/transformers versions write. Built here from the shipped default model.

use crate::common::copy_dir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::OmniRequest;
use fastvideo_torch::DtypeChoice;
use fastvideo_wan::{pipeline, LoadOptions, WanModel};
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../default")
}

/// Rewrites `dir/<stem>.safetensors` as `kind` tensors: two shards plus an index when `shard`,
/// else one file.
fn restore(dir: &Path, stem: &str, kind: Kind, shard: bool) {
    let single = dir.join(format!("{stem}.safetensors"));
    let mut tensors: Vec<(String, Tensor)> = Tensor::read_safetensors(&single).unwrap();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    std::fs::remove_file(&single).unwrap();
    let tensors: Vec<(String, Tensor)> = tensors.into_iter().map(|(k, t)| (k, t.to_kind(kind))).collect();
    if !shard {
        Tensor::write_safetensors(&tensors, &single).unwrap();
        return;
    }
    let half = tensors.len() / 2;
    let mut weight_map = BTreeMap::new();
    for (i, part) in [&tensors[..half], &tensors[half..]].into_iter().enumerate() {
        let name = format!("{stem}-{:05}-of-00002.safetensors", i + 1);
        for (k, _) in part {
            weight_map.insert(k.clone(), Value::String(name.clone()));
        }
        Tensor::write_safetensors(part, dir.join(&name)).unwrap();
    }
    let index = json!({ "metadata": { "total_size": 0 }, "weight_map": weight_map });
    std::fs::write(dir.join(format!("{stem}.safetensors.index.json")), index.to_string()).unwrap();
}

fn add_keys(path: &Path, extra: Value) {
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    std::fs::write(path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
}

/// The default model with every tensor rounded to bf16: sharded bf16 files and configs from
/// other library versions when `published`, else single fp32-valued files as shipped.
fn relaid(published: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&default_model(), dir.path());
    for (component, stem) in
        [("transformer", "diffusion_pytorch_model"), ("vae", "diffusion_pytorch_model"), ("text_encoder", "model")]
    {
        let c = dir.path().join(component);
        if published {
            restore(&c, stem, Kind::BFloat16, true);
        } else {
            // Same values, fp32 storage: round through bf16 once.
            let single = c.join(format!("{stem}.safetensors"));
            let t: Vec<(String, Tensor)> = Tensor::read_safetensors(&single).unwrap();
            let t: Vec<_> = t.into_iter().map(|(k, v)| (k, v.to_kind(Kind::BFloat16).to_kind(Kind::Float))).collect();
            Tensor::write_safetensors(&t, &single).unwrap();
        }
    }
    if published {
        // Keys diffusers 0.33 / transformers 4.41 wrote into Wan-AI's published configs.
        add_keys(
            &dir.path().join("transformer/config.json"),
            json!({"_diffusers_version": "0.33.0.dev0", "_use_default_values": ["pos_embed_seq_len"], "_name_or_path": "Wan-AI/x"}),
        );
        add_keys(
            &dir.path().join("vae/config.json"),
            json!({"_diffusers_version": "0.33.0.dev0", "clip_output": true}),
        );
        add_keys(
            &dir.path().join("text_encoder/config.json"),
            json!({"transformers_version": "4.41.0.dev0", "torch_dtype": "bfloat16", "scalable_attention": true,
                   "output_past": true, "return_dict": true, "id2label": {"0": "LABEL_0"}}),
        );
    }
    dir
}

fn latents(model: &WanModel) -> Tensor {
    let spec = Arc::new(pipeline::text_to_video(model, pipeline::default_guidance()).unwrap());
    let mut r = OmniRequest::text_to_video("relaid", "a red circle moving left on a white background");
    r.sampling.seed = Some(3);
    r.diffusion.num_inference_steps = Some(6);
    r.outputs.return_latents = true;
    let req = r.resolve(&model.limits(), || 0).unwrap();
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else {
        panic!("latents requested")
    };
    Tensor::from_slice(&l.data).view(l.shape.as_slice())
}

#[test]
fn bf16_shards_and_other_versions_configs_load_and_generate_the_same_model() {
    let published = relaid(true);
    let plain = relaid(false);
    let opts = LoadOptions { dtype: DtypeChoice::Fp32, vae_dtype: DtypeChoice::Fp32, ..LoadOptions::new(Device::Cpu) };
    let a = WanModel::load_with(published.path(), opts.clone()).expect("published-style folder loads");
    assert_eq!(a.load_report.transformer_dtype, Kind::Float, "CPU computes in fp32 whatever the storage");
    let b = WanModel::load_with(plain.path(), opts).unwrap();
    // Same values, different storage and configs: bit-identical generation.
    let (la, lb) = (latents(&a), latents(&b));
    assert_eq!(f64::try_from((&la - &lb).abs().max()).unwrap(), 0.0, "bf16 shards changed the computation");
    // And still the shipped model: bf16 rounding of the weights moves the latents only a little.
    let orig = WanModel::load(&default_model(), Device::Cpu).unwrap();
    let lo = latents(&orig);
    let rel = f64::try_from((&la - &lo).norm() / lo.norm()).unwrap();
    assert!(rel < 0.1, "bf16-rounded weights moved the latents by {rel} (relative)");
}

#[test]
fn a_config_key_that_would_change_the_numerics_is_still_refused_by_name() {
    let dir = relaid(true);
    add_keys(&dir.path().join("transformer/config.json"), json!({"rope_theta": 5000.0}));
    let e = match WanModel::load(dir.path(), Device::Cpu) {
        Ok(_) => panic!("loaded a config with an unknown key"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("rope_theta") && e.contains("transformer/config.json"), "{e}");
}

#[test]
fn bf16_compute_on_cpu_stays_close_to_fp32() {
    // The dtype is a load option: the same folder in bf16 (as on CUDA by default) is converted once
    // at load, modules the reference keeps in fp32 stay fp32, and the output stays near fp32's.
    let opts = LoadOptions { dtype: DtypeChoice::Bf16, vae_dtype: DtypeChoice::Bf16, ..LoadOptions::new(Device::Cpu) };
    let m = WanModel::load_with(&default_model(), opts).unwrap();
    assert_eq!(m.load_report.transformer_dtype, Kind::BFloat16);
    let l16 = latents(&m);
    let l32 = latents(&WanModel::load(&default_model(), Device::Cpu).unwrap());
    assert_eq!(l16.kind(), Kind::Float, "latents stay fp32 across the loop");
    let rel = f64::try_from((&l16 - &l32).norm() / l32.norm()).unwrap();
    assert!(rel < 0.1, "bf16 compute moved the latents by {rel} (relative)");
}
