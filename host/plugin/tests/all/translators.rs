//! Workflow translators as plugins: the core pack compiles ComfyUI's Wan 2.1 text-to-video
//! template into one run; unsupported values and untranslated nodes are refused by name; a
//! third-party translator enabled by hash extends what compiles.

use std::path::Path;

use crate::common::{inspect_blake3, plugins, repo};
use fastvideo_comfy::{compile, CompileError, Translators};
use fastvideo_plugin_host::{DeployConfig, Deployment};
use fastvideo_request::{SamplerKind, TaskType};
use serde_json::{json, Value};

/// A deploy enabling `stems` (translator plugins), with `extra` TOML appended.
pub(crate) fn deploy(stems: &[(&str, &str)], extra: &str) -> Deployment {
    let mut toml = String::new();
    for (stem, name) in stems {
        let path = &plugins()[*stem];
        toml += &format!(
            "[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{}\"\n",
            path.display(),
            inspect_blake3(stem)
        );
    }
    toml += extra;
    let cfg: DeployConfig = toml::from_str(&toml).unwrap();
    Deployment::from_config(cfg, Path::new("/")).unwrap()
}

fn core() -> Translators {
    deploy(&[("fastvideo_translator_comfy_core", "comfy-core")], "").translators().unwrap()
}

pub(crate) fn template(name: &str) -> Value {
    let path = repo().join(".comfy-corpus/0.1.123/templates").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run `bash host/scripts/comfy-corpus.sh`)", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_core_pack_declares_what_it_handles() {
    let t = core();
    for ty in ["KSampler", "SamplerCustomAdvanced", "EmptyHunyuanLatentVideo", "SaveVideo", "PrimitiveInt"] {
        assert!(t.handles(ty), "{ty}");
    }
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("plugins/translators/comfy-core/object_info.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(t.types().len(), committed.as_object().unwrap().len(), "every declared type is handled");
    let seed = &t.schemas().get("KSampler").unwrap().inputs[1];
    assert!(seed.name == "seed" && seed.control_after_generate);
}

#[test]
fn wan_text_to_video_compiles_to_one_run() {
    let c = compile(&template("text_to_video_wan.json"), &core()).unwrap();
    assert_eq!(c.runs.len(), 1);
    let r = &c.runs[0];
    assert_eq!(r.task, TaskType::T2v);
    assert!(r.prompt.starts_with("a fox moving quickly"), "{}", r.prompt);
    assert!(r.negative.as_deref().unwrap_or("").starts_with("色调艳丽"), "the negative prompt comes from node 7");
    assert_eq!((r.seed, r.steps, r.cfg, r.sampler), (82628696717253, 30, 6.0, SamplerKind::Unipc));
    assert_eq!(r.shift, Some(8.0), "ModelSamplingSD3");
    assert_eq!((r.width, r.height, r.frames, r.fps), (Some(832), Some(480), Some(33), Some(16.0)));
    assert_eq!(r.outputs.len(), 1);
    assert_eq!((r.outputs[0].node.as_str(), r.outputs[0].prefix.as_str()), ("50", "video/ComfyUI"));
    let roles: Vec<(&str, &str)> = r.files.iter().map(|f| (f.role, f.file.as_str())).collect();
    assert_eq!(
        roles,
        [
            ("vae", "wan_2.1_vae.safetensors"),
            ("diffusion_model", "wan2.1_t2v_1.3B_fp16.safetensors"),
            ("text_encoder", "umt5_xxl_fp8_e4m3fn_scaled.safetensors")
        ]
    );
    // The request carries all of it (text to video reads no input files).
    let req = r.request("p1", Path::new("/nonexistent")).unwrap();
    assert_eq!(req.diffusion.num_frames, Some(33));
    assert_eq!(req.diffusion.fps, Some(16));
    assert_eq!(req.diffusion.shift, Some(8.0));
    // The graph is ordered: loaders before the sampler, the sampler before decode.
    let pos = |origin: &str| c.graph.nodes.iter().position(|n| n.origin == origin).unwrap();
    assert!(pos("37") < pos("48") && pos("48") < pos("3") && pos("3") < pos("8") && pos("8") < pos("50"));
}

#[test]
fn unsupported_values_and_untranslated_nodes_are_refused_by_name() {
    let t = core();
    let mut w = template("text_to_video_wan.json");
    let ks = w["nodes"].as_array_mut().unwrap().iter_mut().find(|n| n["id"] == 3).unwrap();
    ks["widgets_values"][4] = json!("dpmpp_2m");
    let e = compile(&w, &t).unwrap_err().to_string();
    assert_eq!(
        e,
        "node 3: sampler `dpmpp_2m` is not one this runtime runs (euler, uni_pc, uni_pc_bh2, lcm, euler_ancestral, gradient_estimation)"
    );

    let mut w = template("text_to_video_wan.json");
    w["nodes"].as_array_mut().unwrap().push(
        json!({"id": 90, "type": "FancyPromptEncode", "mode": 0, "inputs": [], "outputs": [], "widgets_values": []}),
    );
    w["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": 91, "type": "ImageCompare", "mode": 0, "inputs": [], "outputs": [], "widgets_values": []}));
    let e = compile(&w, &t).unwrap_err();
    assert_eq!(
        e,
        CompileError::Untranslated(vec![
            ("90".into(), "FancyPromptEncode".into()),
            ("91".into(), "ImageCompare".into())
        ]),
        "every missing node, none dropped"
    );

    let api = json!({
        "1": {"class_type": "KSampler", "inputs": {"seed": 1, "steps": 4, "cfg": 5.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}},
    });
    let e = compile(&api, &t).unwrap_err().to_string();
    assert_eq!(e, "node 1: `sample` needs its `model` input connected");
    let e =
        compile(&json!({"1": {"class_type": "VAELoader", "inputs": {"vae_name": "v"}}}), &t).unwrap_err().to_string();
    assert!(e.contains("no output node"), "{e}");
}

#[test]
fn a_third_party_translator_enabled_by_hash_extends_what_compiles() {
    let mut w = template("text_to_video_wan.json");
    // The positive prompt's CLIPTextEncode (6) becomes the made-up FancyPromptEncode.
    let n = w["nodes"].as_array_mut().unwrap().iter_mut().find(|n| n["id"] == 6).unwrap();
    n["type"] = json!("FancyPromptEncode");
    n["widgets_values"] = json!(["a red circle", "shout"]);
    assert!(matches!(compile(&w, &core()), Err(CompileError::Untranslated(_))));

    let both = deploy(
        &[("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_testing_translator_fixture", "fancy")],
        "",
    );
    let t = both.translators().unwrap();
    let c = compile(&w, &t).unwrap();
    assert_eq!(c.runs[0].prompt, "A RED CIRCLE!", "the fixture's translation, widgets named by its schema");

    // Two translators claiming one type is refused, naming both.
    let twice = deploy(&[("fastvideo_translator_comfy_core", "a"), ("fastvideo_translator_comfy_core", "b")], "");
    let e = twice.translators().err().unwrap();
    assert!(e.contains("translators `a` and `b` both handle"), "{e}");
}

#[test]
fn the_deploy_maps_model_files_to_one_folder() {
    let models = "[workflows.models]\n\"wan2.1_t2v_1.3B_fp16.safetensors\" = \"default\"\n\"umt5_xxl_fp8_e4m3fn_scaled.safetensors\" = \"default\"\n";
    let d = deploy(&[("fastvideo_translator_comfy_core", "comfy-core")], models);
    let c = compile(&template("text_to_video_wan.json"), &d.translators().unwrap()).unwrap();
    let e = d.workflows.folder_for(&c.runs[0]).unwrap_err().to_string();
    assert_eq!(e, "node 39: model file `wan_2.1_vae.safetensors` is not mapped to a model folder (deploy config `[workflows.models]`)");
    let d = deploy(
        &[("fastvideo_translator_comfy_core", "comfy-core")],
        &format!("{models}\"wan_2.1_vae.safetensors\" = \"elsewhere\"\n"),
    );
    let e = d.workflows.folder_for(&c.runs[0]).unwrap_err().to_string();
    assert!(e.contains("one run uses one model folder"), "{e}");
    let d = deploy(
        &[("fastvideo_translator_comfy_core", "comfy-core")],
        &format!("{models}\"wan_2.1_vae.safetensors\" = \"default\"\n"),
    );
    assert_eq!(d.workflows.folder_for(&c.runs[0]).unwrap(), "default");
}

#[test]
fn the_wan_pack_adds_wan_2_2s_latent_for_text_and_image_to_video() {
    let w = template("video_wan2_2_5B_ti2v.json");
    let e = compile(&w, &core()).unwrap_err();
    assert_eq!(e, CompileError::Untranslated(vec![("55".into(), "Wan22ImageToVideoLatent".into())]));
    let both = deploy(
        &[("fastvideo_translator_comfy_core", "comfy-core"), ("fastvideo_translator_comfy_wan", "comfy-wan")],
        "",
    );
    let t = both.translators().unwrap();
    let c = compile(&w, &t).unwrap();
    let r = &c.runs[0];
    assert_eq!(
        (r.task, r.width, r.height, r.frames, r.steps, r.fps),
        (TaskType::T2v, Some(1280), Some(704), Some(121), 20, Some(24.0))
    );
    assert_eq!(r.latent_node, "55");
    // With a start image it is image to video from that picture, cropped to the latent's size.
    let mut api = c.workflow.to_api();
    api["90"] = json!({"class_type": "LoadImage", "inputs": {"image": "start.png"}});
    api["55"]["inputs"]["start_image"] = json!(["90", 0]);
    let c = compile(&json!({ "prompt": api }), &t).unwrap();
    let r = &c.runs[0];
    assert_eq!((r.task, r.images.len(), r.images[0].node.as_str()), (TaskType::I2v, 1, "90"));
    assert_eq!((r.images[0].resize[0].width, r.images[0].resize[0].height), (1280, 704));
    // A start image that is not a picture is refused by the graph's type check.
    api["91"] = json!({"class_type": "PrimitiveInt", "inputs": {"value": 1}});
    api["55"]["inputs"]["start_image"] = json!(["91", 0]);
    let e = compile(&json!({ "prompt": api }), &t).unwrap_err().to_string();
    assert_eq!(e, "node 55: `start_image` of `latent.image_to_video` takes images, got a literal");
}
