//! LoRA adapters through the command line and the server: `fastvideo lora inspect`, `--lora` on
//! `generate`, `[[adapters]]` in a deploy (pinned by hash), and per-request `lora` from the
//! official openai client. The adapters are the tiny fixtures of tests/fixtures/lora (they fit
//! tests/fixtures/tiny-wan); their parity with diffusers is models/wan's lora tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::server::{metric, Server};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().expect("fastvideo runs")
}

fn adapter(name: &str) -> String {
    fixtures().join("lora").join(format!("{name}.safetensors")).display().to_string()
}

fn hash(path: &str) -> String {
    blake3::hash(&std::fs::read(path).unwrap()).to_hex().to_string()
}

/// A deploy enabling the `original` and `kohya` fixtures (the latter at default strength 0.5).
fn deploy(dir: &Path, original_hash: &str) -> PathBuf {
    let file = dir.join("deploy.toml");
    let text = format!(
        "[[adapters]]\nname = \"style\"\nsource = \"{}\"\nblake3 = \"{original_hash}\"\n\n\
         [[adapters]]\nname = \"kohya\"\nsource = \"{}\"\nblake3 = \"{}\"\ndefault_scale = 0.5\n",
        adapter("original"),
        adapter("kohya"),
        hash(&adapter("kohya"))
    );
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn inspect_reports_format_rank_and_hash() {
    let out = fastvideo(&["lora", "inspect", &adapter("original"), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "original (diffusion_model.…)");
    assert_eq!(v["ranks"], serde_json::json!([4]));
    assert_eq!(v["alphas"], serde_json::json!([2.0]));
    assert_eq!(v["modules"], 22);
    assert_eq!(
        (v["weight_diffs"].as_u64(), v["bias_diffs"].as_u64(), v["ignored_keys"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(v["blake3"].as_str().unwrap(), hash(&adapter("original")));
    assert_eq!(v["targets"]["blocks.*.attn1.to_q"], 2);
    let bad = fastvideo(&["lora", "inspect", &fixtures().join("tiny-wan/model_index.json").display().to_string()]);
    crate::common::assert_user_error(&bad, "not a readable safetensors file");
}

#[test]
fn generate_runs_adapters_from_files_and_refuses_ones_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixtures().join("tiny-wan").display().to_string();
    let run = |name: &str, lora: &[&str]| {
        let out = dir.path().join(format!("{name}.mp4"));
        let mut args = vec!["generate", "--model", &model, "--prompt", "a red circle", "--frames", "5"];
        args.extend(["--height", "32", "--width", "32", "--seed", "1", "--quiet", "--device", "cpu"]);
        let out_s = out.display().to_string();
        args.extend(["--out", &out_s]);
        let lora: Vec<String> = lora.iter().map(|l| format!("--lora={l}")).collect();
        args.extend(lora.iter().map(String::as_str));
        let o = fastvideo(&args);
        (o, out)
    };
    let (o, plain) = run("plain", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let original = adapter("original");
    let (o, styled) = run("styled", &[&format!("{original}=0.8")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (o, zero) = run("zero", &[&format!("{original}=0")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |p: &PathBuf| std::fs::read(p).unwrap();
    assert_ne!(read(&plain), read(&styled), "the adapter changes the video");
    assert_eq!(read(&plain), read(&zero), "strength 0 is no adapter, bit for bit");
    let (o, _) = run("i2v", &[&adapter("i2v")]);
    crate::common::assert_user_error(&o, "blocks.0.cross_attn.k_img.lora_down.weight");
    let (o, _) = run("unknown", &["no-such"]);
    crate::common::assert_user_error(&o, "lora[0].name");
    let (o, _) = run("nan", &[&format!("{original}=nan")]);
    crate::common::assert_user_error(&o, "lora[0].scale");
}

#[test]
fn a_deploy_pins_adapters_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixtures().join("tiny-wan").display().to_string();
    let wrong = deploy(dir.path(), &"0".repeat(64));
    let out = Command::new(env!("CARGO_BIN_EXE_fastvideo"))
        .args(["serve", "--port", "0", "--device", "cpu", "--ephemeral", "--model", &model, "--deploy"])
        .arg(&wrong)
        .output()
        .unwrap();
    crate::common::assert_user_error(&out, "[[adapters]] `style`: blake3");
}

#[test]
fn the_openai_client_runs_adapters_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixtures().join("tiny-wan").display().to_string();
    let file = deploy(dir.path(), &hash(&adapter("original")));
    let server =
        Server::start(&["--model", &model, "--deploy", file.to_str().unwrap(), "--max-loras-per-request", "2"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/clients/openai_lora.py");
    let out = Command::new(crate::common::client_python()).arg(script).arg(&server.base).arg("style").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&r["differs"], &r["reproducible"]), (&true.into(), &true.into()), "{r}");
    assert_eq!((r["unknown"]["status"].as_u64(), r["unknown"]["param"].as_str()), (Some(400), Some("lora[0].name")));
    let message = r["unknown"]["message"].as_str().unwrap();
    assert!(message.contains("kohya, style"), "the error lists the enabled adapters: {message}");
    // Loaded once, then found in the cache.
    let m = server.metrics();
    assert_eq!(metric(&m, "fastvideo_adapter_loads_total", None), 1.0);
    assert!(metric(&m, "fastvideo_adapter_hits_total", None) >= 1.0);
    assert!(metric(&m, "fastvideo_adapter_bytes", None) > 0.0);
    // Each job ran alone, so the engine merged its set into the weights (and restored them for
    // the plain job): the merged path served the same, reproducible video as above.
    assert!(metric(&m, "fastvideo_adapter_merges_total", None) >= 1.0);
    // Bad input: too many, a strength out of bounds, not a list; each a 400 naming the field.
    let base =
        serde_json::json!({"prompt": "a red circle", "size": "32x32", "num_frames": 5, "num_inference_steps": 1});
    for (lora, param) in [
        (serde_json::json!([{"name": "style"}, {"name": "kohya"}, {"name": "third"}]), "lora"),
        (serde_json::json!([{"name": "style", "scale": 11}]), "lora[0].scale"),
        (serde_json::json!([{"name": "style"}, {"name": "style"}]), "lora[1].name"),
        (serde_json::json!("style"), "lora"),
        (serde_json::json!([{"name": "style", "weight": 1}]), "lora[0].weight"),
    ] {
        let mut body = base.clone();
        body["lora"] = lora.clone();
        let (status, v) = server.post("/v1/videos", body);
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some(param)), "{lora}: {v}");
    }
    // Two requests with different sets (one at the deploy's default strength) both finish.
    let mut a = base.clone();
    a["lora"] = serde_json::json!([{"name": "kohya"}]);
    let (_, a) = server.post("/v1/videos", a);
    let mut b = base.clone();
    b["lora"] = serde_json::json!([{"name": "style", "scale": -0.5}, {"name": "kohya", "scale": 1}]);
    let (_, b) = server.post("/v1/videos", b);
    for v in [a, b] {
        let done = server.wait_done(v["id"].as_str().unwrap());
        assert_eq!(done["status"], "completed", "{done}");
    }
}

#[test]
fn a_lora_runs_on_a_model_served_beside_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixtures().join("tiny-wan").display().to_string();
    let (main, copy) = (format!("main={tiny}"), format!("copy={tiny}"));
    let deploy = dir.path().join("deploy.toml");
    let text = format!(
        "[[adapters]]\nname = \"style\"\nsource = \"{}\"\nblake3 = \"{}\"\nmodel = \"copy\"\n",
        adapter("original"),
        hash(&adapter("original"))
    );
    std::fs::write(&deploy, text).unwrap();
    let server = Server::start(&["--model", &main, "--model", &copy, "--deploy", deploy.to_str().unwrap()]);
    let body = |model: &str, lora: bool| {
        let mut b = serde_json::json!({"model": model, "prompt": "a red circle", "size": "32x32", "num_frames": 5,
            "num_inference_steps": 2, "seed": 7});
        if lora {
            b["lora"] = serde_json::json!([{"name": "style"}]);
        }
        b
    };
    let video = |b: serde_json::Value| {
        let (status, v) = server.post("/v1/videos", b);
        assert_eq!(status, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(server.wait_done(&id)["status"], "completed");
        server.bytes(&format!("/v1/videos/{id}/content")).1
    };
    let plain = video(body("copy", false));
    let styled = video(body("copy", true));
    assert_ne!(plain, styled, "the adapter changes the second model's video");
    assert_eq!(video(body("copy", true)), styled, "and does so reproducibly");
    // Each model says what it offers: the adapters are the second model's, weight updates the
    // pinned primary's, and the second, with adapters merged into its weights, never sleeps.
    let caps = server.get("/v1/capabilities").1;
    let offers = |m: &str| caps["data"].as_array().unwrap().iter().find(|e| e["model"] == m).unwrap()["offers"].clone();
    assert_eq!(offers("main"), serde_json::json!({"adapters": false, "weight_updates": true, "sleeps": false}));
    assert_eq!(offers("copy"), serde_json::json!({"adapters": true, "weight_updates": false, "sleeps": false}));
    // The adapter is the second model's: the primary refuses it, naming the field.
    let (status, e) = server.post("/v1/videos", body("main", true));
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("lora")), "{e}");
    // A deploy naming a model this server does not serve refuses to start.
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(&wrong, std::fs::read_to_string(&deploy).unwrap().replace("\"copy\"", "\"other\"")).unwrap();
    let out = fastvideo(&[
        "serve",
        "--port",
        "0",
        "--device",
        "cpu",
        "--ephemeral",
        "--model",
        &main,
        "--deploy",
        wrong.to_str().unwrap(),
    ]);
    crate::common::assert_user_error(&out, "[[adapters]] `style`: model = \"other\" is not served here");
}

#[test]
fn world_sessions_take_the_deploys_world_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let large = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-lora-large/large.safetensors");
    let deploy = dir.path().join("deploy.toml");
    let text = format!(
        "[[adapters]]\nname = \"large\"\nsource = \"{}\"\nblake3 = \"{}\"\nworld = true\n",
        large.display(),
        hash(large.to_str().unwrap())
    );
    std::fs::write(&deploy, text).unwrap();
    let server = Server::start(&["--world", "default", "--max-sessions", "2", "--deploy", deploy.to_str().unwrap()]);
    let (status, s) = server.post("/v1/sessions", serde_json::json!({"lora": [{"name": "large", "scale": 0.5}]}));
    assert_eq!(status, 200, "{s}");
    let (status, e) = server.post("/v1/sessions", serde_json::json!({"lora": [{"name": "small"}]}));
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("lora[0].name")), "{e}");
    // World adapters are the sessions'; jobs on the served model cannot name them.
    let body = serde_json::json!({"prompt": "a red circle", "num_inference_steps": 1, "lora": [{"name": "large"}]});
    let (status, e) = server.post("/v1/videos", body);
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("lora")), "{e}");
    let del = ureq::delete(&server.url(&format!("/v1/sessions/{}", s["id"].as_str().unwrap()))).call().unwrap();
    assert_eq!(del.status().as_u16(), 200);
}

#[test]
fn comfyui_lora_loaders_run_the_deploys_adapters() {
    use crate::common::comfy;
    let dir = tempfile::tempdir().unwrap();
    let large = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-lora-large/large.safetensors");
    let deploy = comfy::deploy(dir.path());
    let mut text = std::fs::read_to_string(&deploy).unwrap();
    text = format!(
        "[[adapters]]\nname = \"large\"\nsource = \"{}\"\nblake3 = \"{}\"\n\n{text}",
        large.display(),
        hash(large.to_str().unwrap())
    );
    std::fs::write(&deploy, text).unwrap();
    let files = dir.path().join("comfy");
    let s = Server::start(&["--deploy", deploy.to_str().unwrap(), "--comfy-dir", files.to_str().unwrap()]);
    // The small Wan template in the API format, with a LoraLoaderModelOnly after the UNET loader.
    let file = comfy::small_wan_file(dir.path(), 4);
    let out = fastvideo(&["workflow", "parse", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plain: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let unet = plain.as_object().unwrap().iter().find(|(_, n)| n["class_type"] == "UNETLoader").unwrap().0.clone();
    let with_lora = |strength: f64, name: &str| {
        let mut p = plain.clone();
        for n in p.as_object_mut().unwrap().values_mut() {
            if n["inputs"]["model"] == serde_json::json!([unet, 0]) {
                n["inputs"]["model"] = serde_json::json!(["900", 0]);
            }
        }
        p["900"] = serde_json::json!({"class_type": "LoraLoaderModelOnly",
            "inputs": {"model": [unet, 0], "lora_name": name, "strength_model": strength}});
        p
    };
    let mut ws = comfy::connect(&s, "c");
    let mut run = |prompt: serde_json::Value, id: &str| {
        let (code, r) = s.post("/prompt", serde_json::json!({"prompt": prompt, "client_id": "c", "prompt_id": id}));
        assert_eq!(code, 200, "{r}");
        let seen = comfy::until_done(&mut ws, id);
        let executed = seen.iter().find(|m| m["type"] == "executed").unwrap_or_else(|| panic!("{seen:?}"));
        let f = &executed["data"]["output"]["images"][0];
        let url = format!(
            "/view?filename={}&subfolder={}&type=output",
            f["filename"].as_str().unwrap(),
            f["subfolder"].as_str().unwrap()
        );
        s.bytes(&url).1
    };
    let base = run(plain.clone(), "plain");
    let larger = run(with_lora(1.0, "large.safetensors"), "large");
    // `workflow run` applies the workflow's LoRA as `/prompt` does: the same file, byte for byte.
    let local = |prompt: &serde_json::Value, name: &str| {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, prompt.to_string()).unwrap();
        let out_dir = dir.path().join(format!("out-{name}"));
        let out = fastvideo(&[
            "workflow",
            "run",
            file.to_str().unwrap(),
            "--deploy",
            deploy.to_str().unwrap(),
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--quiet",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
    };
    assert_eq!(local(&with_lora(1.0, "large.safetensors"), "large"), larger, "workflow run takes the LoRA");
    assert_eq!(local(&plain, "plain"), base);
    let zero = run(with_lora(0.0, "loras/large.safetensors"), "zero");
    assert_ne!(base, larger, "the adapter changes the video");
    assert_eq!(base, zero, "strength_model 0 is the plain model, byte for byte");
    // A lora_name the deploy does not enable: ComfyUI's node error on the loader.
    let (code, r) = s.post("/prompt", serde_json::json!({"prompt": with_lora(1.0, "other.safetensors")}));
    assert_eq!(code, 400, "{r}");
    assert!(r["node_errors"]["900"].is_object(), "{r}");
}

/// A file of another family is read with that family's names: FLUX.2's BFL `qkv` counts as the
/// three modules it fuses (2 blocks × 12 + 2 × 2 + 8 outside the blocks), Qwen-Image's kohya
/// names as its modules.
#[test]
fn inspect_reads_image_family_files_with_their_names() {
    let fixture = |f: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/image_lora").join(f);
    let inspect = |f: &str| {
        let out = fastvideo(&["lora", "inspect", fixture(f).to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = inspect("flux2_bfl.safetensors");
    assert_eq!((v["format"].as_str(), v["modules"].as_u64()), (Some("original (diffusion_model.…)"), Some(36)));
    let v = inspect("qwenimage_kohya.safetensors");
    assert_eq!((v["format"].as_str(), v["modules"].as_u64()), (Some("kohya"), Some(34)));
}
