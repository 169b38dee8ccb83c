//! Loading failures name the file and the key; text-to-image runs as a one-frame video.

use crate::common::copy_dir;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{OmniRequest, TaskType};
use fastvideo_wan::{pipeline, WanModel};
use tch::Device;

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan")
}

fn load_err(dir: &Path) -> String {
    match WanModel::load(dir, Device::Cpu) {
        Ok(_) => panic!("{} loaded but should not", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn a_missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tiny(), dir.path());
    std::fs::remove_file(dir.path().join("text_encoder/model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(dir.path());
    assert!(
        e.contains("shard") && e.contains("model-00002-of-00002.safetensors") && e.contains("does not exist"),
        "{e}"
    );
}

#[test]
fn a_config_that_disagrees_with_the_weights_names_key_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tiny(), dir.path());
    let cfg = dir.path().join("transformer/config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"ffn_dim\": 48", "\"ffn_dim\": 64");
    std::fs::write(&cfg, text).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("`blocks.0.ffn.net.0.proj.weight` has shape [48, 24], the config implies [64, 24]"), "{e}");
}

#[test]
fn a_boundary_without_a_second_expert_is_refused_by_key() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tiny(), dir.path());
    let idx = dir.path().join("model_index.json");
    let text = std::fs::read_to_string(&idx).unwrap().replace("\"boundary_ratio\": null", "\"boundary_ratio\": 0.875");
    std::fs::write(&idx, text).unwrap();
    let e = load_err(dir.path());
    assert!(e.contains("`boundary_ratio` is set but there is no `transformer_2`"), "{e}");
}

#[test]
fn a_folder_saved_from_the_video_to_video_pipeline_loads() {
    // diffusers' WanVideoToVideoPipeline saves the text-to-video components under its own class
    // name, without the Wan 2.2 keys (issue 54: refused for its `_class_name`).
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tiny(), dir.path());
    let idx = dir.path().join("model_index.json");
    let mut index: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&idx).unwrap()).unwrap();
    index.insert("_class_name".into(), "WanVideoToVideoPipeline".into());
    for key in ["boundary_ratio", "expand_timesteps", "transformer_2"] {
        index.remove(key);
    }
    std::fs::write(&idx, serde_json::to_string_pretty(&index).unwrap()).unwrap();
    let model = WanModel::load(dir.path(), Device::Cpu).expect("a WanVideoToVideoPipeline folder loads");
    assert!(model.image.is_none());
    assert!(model.limits().tasks.contains(&TaskType::V2v));
    index.insert("_class_name".into(), "WanVideoToVideoPipelinex".into());
    std::fs::write(&idx, serde_json::to_string_pretty(&index).unwrap()).unwrap();
    assert!(load_err(dir.path()).contains("WanVideoToVideoPipeline and WanImageToVideoPipeline"));
}

#[test]
fn text_to_image_is_a_one_frame_video() {
    let model = WanModel::load(&tiny(), Device::Cpu).unwrap();
    let spec = Arc::new(pipeline::text_to_video(&model, pipeline::default_guidance()).unwrap());
    let mut r = OmniRequest::text_to_video("img", "a green star");
    r.task = TaskType::T2i;
    r.diffusion.height = Some(48);
    r.diffusion.width = Some(32);
    r.diffusion.num_inference_steps = Some(2);
    let req = r.resolve(&model.limits(), || 1).unwrap();
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let v = out.video().unwrap();
    assert_eq!((v.num_frames, v.height, v.width, v.rgb.len()), (1, 48, 32, 48 * 32 * 3));
    // Random weights still give a non-constant image.
    assert!(v.rgb.iter().any(|&b| b != v.rgb[0]));
}

#[test]
fn the_cost_keys_unit_is_the_transformers_tokens_so_sizes_of_as_many_share_it() {
    let model = WanModel::load(&tiny(), Device::Cpu).unwrap();
    let work = fastvideo_wan::work::work(&model);
    let tokens = |frames, height, width| {
        let mut r = OmniRequest::text_to_video("w", "a green star");
        (r.diffusion.num_frames, r.diffusion.height, r.diffusion.width) = (Some(frames), Some(height), Some(width));
        work(&r.resolve(&model.limits(), || 1).unwrap())
    };
    // 17 frames are 5 latent frames; 48x32 pixels are 3x2 patches of 16.
    assert_eq!(tokens(17, 48, 32), 5 * 3 * 2);
    // The engine's key is (tokens, forwards, model): other pixels of as many tokens share it.
    assert_eq!(tokens(17, 48, 32), tokens(17, 32, 48));
    assert_eq!(tokens(17, 96, 32), tokens(17, 48, 64));
    assert_ne!(tokens(17, 48, 32), tokens(21, 48, 32));
}

#[test]
fn a_sharded_index_cannot_point_outside_the_model_folder() {
    use fastvideo_wan::weights::index_shards;
    let ok = r#"{"weight_map": {"a": "m-00002.safetensors", "b": "m-00001.safetensors", "c": "m-00001.safetensors"}}"#;
    assert_eq!(index_shards(ok).unwrap(), ["m-00001.safetensors", "m-00002.safetensors"]);
    for (bad, says) in [
        (r#"{"weight_map": {"a": "../x.safetensors"}}"#, "weight_map.a: `../x.safetensors` is not"),
        (r#"{"weight_map": {"a": "/etc/x.safetensors"}}"#, "weight_map.a"),
        (r#"{"weight_map": {"a": "sub/x.safetensors"}}"#, "weight_map.a"),
        (r#"{"weight_map": {"a": "sub\\x.safetensors"}}"#, "weight_map.a"),
        (r#"{"weight_map": {"a": "C:x.safetensors"}}"#, "weight_map.a"),
        (r#"{"weight_map": {"a": "x.bin"}}"#, "weight_map.a"),
        (r#"{"weight_map": {"a": 3}}"#, "weight_map.a: the shard must be a file name string"),
        (r#"{"weight_map": {}}"#, "lists no tensors"),
        (r#"{"metadata": {}}"#, "no `weight_map` object"),
        ("{", "not valid JSON"),
    ] {
        let e = format!("{:#}", index_shards(bad).unwrap_err());
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// The disk tier frees the transformer's linears entirely and reads them back equal.
#[test]
fn sleeping_to_disk_frees_the_linears_and_waking_reads_them_back() {
    use fastvideo_pipeline::Residency;
    let model = WanModel::load(&tiny(), Device::Cpu).unwrap();
    let before: Vec<tch::Tensor> = model.transformer.linears().iter().map(|l| l.weight.copy()).collect();
    let r = fastvideo_wan::residency::DiskResidency::new(&model).unwrap();
    r.sleep().unwrap();
    assert!(model.transformer.linears().iter().all(|l| l.weight.numel() == 0), "asleep: nothing held");
    r.wake().unwrap();
    let after = model.transformer.linears();
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert!(a.weight.equal(b), "woken from disk: the same weights");
    }
}

/// A model loaded lazily reads none of its transformer's linears, counts them in its resident
/// bytes all the same, and its first wake (either tier) gives the weights an eager load has.
#[test]
fn a_lazy_load_reads_no_linears_until_its_first_wake() {
    use fastvideo_pipeline::Residency;
    use fastvideo_wan::residency::{resident_bytes, DiskResidency, TransformerResidency};
    let eager = WanModel::load(&tiny(), Device::Cpu).unwrap();
    let want: Vec<tch::Tensor> = eager.transformer.linears().iter().map(|l| l.weight.copy()).collect();
    let lazy_opts =
        || fastvideo_wan::LoadOptions { lazy_transformer: true, ..fastvideo_wan::LoadOptions::new(Device::Cpu) };
    for tier in ["host", "disk"] {
        let lazy = WanModel::load_with(&tiny(), lazy_opts()).unwrap();
        assert!(lazy.transformer.linears().iter().all(|l| l.weight.numel() == 0), "{tier}: nothing read");
        assert_eq!(resident_bytes(&lazy), resident_bytes(&eager), "{tier}: counted as if loaded");
        let r: Box<dyn Residency> = match tier {
            "host" => Box::new(TransformerResidency::new(&lazy)),
            _ => Box::new(DiskResidency::new(&lazy).unwrap()),
        };
        assert!(!r.is_resident(), "{tier}");
        assert_eq!(r.bytes(), resident_bytes(&eager));
        r.wake().unwrap();
        let got = lazy.transformer.linears();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!(a.weight.equal(b), "{tier}: the first wake reads the checkpoint's weights");
        }
        // Afterwards it sleeps and wakes like any model.
        r.sleep().unwrap();
        r.wake().unwrap();
        assert!(lazy.transformer.linears().iter().zip(&want).all(|(a, b)| a.weight.equal(b)), "{tier}");
    }
    // A missing linear is still found at load, not at the first wake.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&tiny(), dir.path());
    let ckpt = dir.path().join("transformer/diffusion_pytorch_model.safetensors");
    let mut tensors = tch::Tensor::read_safetensors(&ckpt).unwrap();
    tensors.retain(|(k, _)| k != "proj_out.weight");
    tch::Tensor::write_safetensors(&tensors, &ckpt).unwrap();
    let e = format!("{:#}", WanModel::load_with(dir.path(), lazy_opts()).err().unwrap());
    assert!(e.contains("proj_out.weight"), "{e}");
    // So is a tensor of another model, which the first wake would refuse.
    let mut tensors =
        tch::Tensor::read_safetensors(tiny().join("transformer/diffusion_pytorch_model.safetensors")).unwrap();
    tensors.push(("extra.weight".to_string(), tch::Tensor::zeros([2, 2], (tch::Kind::Float, Device::Cpu))));
    tch::Tensor::write_safetensors(&tensors, &ckpt).unwrap();
    let e = format!("{:#}", WanModel::load_with(dir.path(), lazy_opts()).err().unwrap());
    assert!(e.contains("`extra.weight` is not a tensor of this transformer"), "{e}");
}
