//! The RL surface of `fastvideo serve` with the shipped default model: `POST /v1/rollouts`
//! (grouped samples streamed as safetensors, with trajectories, log-probabilities and rewards
//! from the first-party reward plugins) and `/v1/weights` (live updates, epochs, refusals).

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use serde_json::{json, Value};

use crate::common;
use crate::common::server::Server;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A deploy enabling both scene rewards, pinned by the hashes of what was just built.
fn rewards_deploy(dir: &Path) -> PathBuf {
    let built = common::plugins();
    let mut toml = String::new();
    for (name, stem) in
        [("color_match", "fastvideo_reward_color_match"), ("motion_direction", "fastvideo_reward_motion_direction")]
    {
        let wasm = &built[stem];
        let hash = blake3::hash(&std::fs::read(wasm).unwrap()).to_hex().to_string();
        toml += &format!(
            "[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nblake3 = \"{hash}\"\ngrants = [\"tensor\", \"tensor-ops\"]\n",
            wasm.display()
        );
    }
    let p = dir.join("rewards.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

/// One decoded record of a rollout stream: metadata and tensors as (shape, f32 or raw bytes).
struct Record {
    meta: HashMap<String, String>,
    tensors: HashMap<String, (Vec<usize>, Vec<u8>)>,
}

impl Record {
    fn f32s(&self, name: &str) -> Vec<f32> {
        self.tensors[name].1.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn i64s(&self, name: &str) -> Vec<i64> {
        self.tensors[name].1.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn num(&self, key: &str) -> u64 {
        self.meta[key].parse().unwrap()
    }
}

/// POSTs a rollout and reads its stream to the end: (status, records or the JSON error).
fn rollout(server: &Server, body: Value) -> Result<Vec<Record>, (u16, Value)> {
    let r =
        ureq::post(&server.url("/v1/rollouts")).config().http_status_as_error(false).build().send_json(&body).unwrap();
    let status = r.status().as_u16();
    if status != 200 {
        return Err((status, r.into_body().read_json().unwrap()));
    }
    assert_eq!(r.headers()["content-type"], fastvideo_server::ROLLOUT_MEDIA_TYPE);
    let total: usize = r.headers()["x-rollout-samples"].to_str().unwrap().parse().unwrap();
    let zstd = body["compress"] == "zstd";
    let mut reader = r.into_body().into_reader();
    let mut out = Vec::new();
    for _ in 0..total {
        let mut len = [0u8; 8];
        reader.read_exact(&mut len).unwrap();
        let mut blob = vec![0u8; u64::from_le_bytes(len) as usize];
        reader.read_exact(&mut blob).unwrap();
        if zstd {
            blob = zstd::decode_all(&blob[..]).unwrap();
        }
        let (_, header) = SafeTensors::read_metadata(&blob).unwrap();
        let meta = header.metadata().clone().unwrap_or_default();
        let st = SafeTensors::deserialize(&blob).unwrap();
        let tensors = st.tensors().into_iter().map(|(n, v)| (n, (v.shape().to_vec(), v.data().to_vec()))).collect();
        out.push(Record { meta, tensors });
    }
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{} bytes after the last record", rest.len());
    Ok(out)
}

const PROMPTS: [&str; 2] =
    ["a red circle moving left on a white background", "a blue square moving up on a black background"];

#[test]
fn rollouts_stream_groups_with_trajectories_log_probs_and_rewards() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["--deploy", rewards_deploy(dir.path()).to_str().unwrap()]);
    let body = json!({
        "prompts": PROMPTS, "group_size": 3, "seed": 100, "num_inference_steps": 4, "sde_steps": [1, 3],
        "rewards": ["color_match", "motion_direction"], "return_video": true, "compress": "zstd",
    });
    let recs = rollout(&server, body.clone()).unwrap();
    assert_eq!(recs.len(), 6);
    let mut seen = BTreeSet::new();
    for r in &recs {
        let (p, k) = (r.num("prompt_index"), r.num("group_index"));
        assert!(seen.insert((p, k)), "sample ({p}, {k}) twice");
        assert_eq!(r.num("seed"), 100 + p * 3 + k, "seeds are base + p*K + k");
        assert_eq!(r.meta["prompt"], PROMPTS[p as usize]);
        assert_eq!(r.num("weight_epoch"), 0);
        let rewards: HashMap<String, f32> = serde_json::from_str(&r.meta["rewards"]).unwrap();
        assert!((0.0..=1.0).contains(&rewards["color_match"]), "{rewards:?}");
        assert!((-1.0..=1.0).contains(&rewards["motion_direction"]), "{rewards:?}");
        // The trajectory: the two stochastic steps' log-probabilities and the latents around them.
        assert_eq!(r.i64s("trajectory.sde_steps"), [1, 3]);
        assert!(r.f32s("trajectory.log_probs").iter().all(|v| v.is_finite()));
        assert_eq!(r.i64s("trajectory.latent_steps"), [1, 2, 3, 4]);
        assert_eq!(r.tensors["trajectory.latents"].0, [4, 1, 16, 5, 8, 8]);
        assert_eq!(r.f32s("trajectory.timesteps").len(), 4);
        assert_eq!(r.f32s("trajectory.sigmas").len(), 5);
        assert_eq!(r.tensors["latents"].0, [1, 16, 5, 8, 8]);
        assert_eq!(r.tensors["video"].0, [17, 64, 64, 3]);
        // The last kept latent (after the last step) is the final one.
        let lat = r.f32s("trajectory.latents");
        assert!(lat[3 * 5120..] == r.f32s("latents")[..], "the trajectory ends at the final latents");
    }
    // Same seed, same sample: the first sample of a one-prompt rollout seeded 100 is (0, 0) above.
    let again =
        rollout(&server, json!({"prompts": [PROMPTS[0]], "seed": 100, "num_inference_steps": 4, "sde_steps": [1, 3]}))
            .unwrap();
    let first = recs.iter().find(|r| r.num("prompt_index") == 0 && r.num("group_index") == 0).unwrap();
    assert_eq!(again[0].f32s("trajectory.log_probs"), first.f32s("trajectory.log_probs"));
    assert!(again[0].f32s("latents") == first.f32s("latents"), "same seed, same latents");
    // Bad input: a 400 naming the field, before any work.
    for (bad, param) in [
        (json!({"prompts": [], "num_inference_steps": 2}), "prompts"),
        (json!({"prompts": ["x"], "group_size": 0}), "group_size"),
        (json!({"prompts": ["x"], "num_inference_steps": 4, "sde_steps": [4]}), "sde_steps"),
        (json!({"prompts": ["x"], "noise_level": -1}), "noise_level"),
        (json!({"prompts": ["x"], "rewards": ["aesthetics"]}), "rewards"),
        (json!({"prompts": ["x"], "compress": "gzip"}), "compress"),
        (json!({"prompts": ["x"], "grup_size": 2}), "grup_size"),
    ] {
        let (status, v) = rollout(&server, bad.clone()).err().unwrap_or_else(|| panic!("{bad} was accepted"));
        assert_eq!(status, 400, "{bad}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(v["error"]["param"] == param || msg.contains(param.trim_end_matches('s')), "{bad}: {v}");
    }
}

/// The default model's transformer with one tensor scaled: other weights of the same model.
fn perturbed_checkpoint(dir: &Path, scale: f32, drop: Option<&str>) -> PathBuf {
    let src = std::fs::read(repo().join("models/default/transformer/diffusion_pytorch_model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&src).unwrap();
    let mut bufs: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, v) in st.tensors() {
        if Some(name.as_str()) == drop {
            continue;
        }
        let mut data = v.data().to_vec();
        if name == "proj_out.weight" {
            assert_eq!(v.dtype(), safetensors::Dtype::F32);
            for c in data.chunks_mut(4) {
                let x = f32::from_le_bytes(c.try_into().unwrap()) * scale;
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
        bufs.push((name, v.dtype(), v.shape().to_vec(), data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = bufs
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let path = dir.join(format!("w-{scale}-{}.safetensors", drop.unwrap_or("all")));
    std::fs::write(&path, safetensors::tensor::serialize(views, None).unwrap()).unwrap();
    path
}

#[test]
fn weight_updates_swap_between_requests_pin_running_ones_and_refuse_bad_files() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (status, w0) = server.get("/v1/weights");
    assert_eq!(status, 200, "{w0}");
    assert_eq!(w0["epoch"], 0);
    let initial = std::fs::read(repo().join("models/default/transformer/diffusion_pytorch_model.safetensors")).unwrap();
    assert_eq!(w0["hash"], blake3::hash(&initial).to_hex().to_string());
    let sample = |server: &Server| {
        let r = rollout(server, json!({"prompts": [PROMPTS[0]], "seed": 5, "num_inference_steps": 3})).unwrap();
        (r[0].f32s("latents"), r[0].num("weight_epoch"))
    };
    let (a, e) = sample(&server);
    assert_eq!(e, 0);

    // New weights: the next request runs on them, as epoch 1.
    let new = perturbed_checkpoint(dir.path(), 1.5, None);
    let (status, w1) = server.post("/v1/weights", json!({"path": new}));
    assert_eq!(status, 200, "{w1}");
    assert_eq!(w1["epoch"], 1);
    assert_eq!(w1["hash"], blake3::hash(&std::fs::read(&new).unwrap()).to_hex().to_string());
    let (b, e) = sample(&server);
    assert_eq!(e, 1);
    assert!(a != b, "other weights, other output");

    // Refused, naming what is wrong; the epoch-1 weights keep serving.
    let missing = perturbed_checkpoint(dir.path(), 1.0, Some("proj_out.bias"));
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"not a checkpoint").unwrap();
    // A whole model folder of another architecture, refused before its weights are read.
    let other = dir.path().join("other");
    std::fs::create_dir_all(other.join("transformer")).unwrap();
    std::fs::write(other.join("model_index.json"), r#"{"_class_name": "FluxPipeline"}"#).unwrap();
    for (path, says) in [
        (dir.path().join("nope.safetensors"), "no such file"),
        (missing, "proj_out.bias"),
        (garbage, "not a readable safetensors file"),
        (other, "architecture `FluxPipeline` (model_index.json) is not this model's family (wan)"),
        (repo().join("models/default/vae/diffusion_pytorch_model.safetensors"), "transformer"),
    ] {
        let (status, v) = server.post("/v1/weights", json!({"path": path}));
        assert_eq!(status, 400, "{}: {v}", path.display());
        assert_eq!(v["error"]["code"], "weights_refused", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{}: {v}", path.display());
    }
    assert_eq!(server.get("/v1/weights").1["epoch"], 1);
    assert!(sample(&server) == (b.clone(), 1), "the epoch-1 weights still serve");

    // A request running when an update lands finishes on the weights it started with.
    let long = std::thread::scope(|s| {
        let running = s.spawn(|| {
            rollout(&server, json!({"prompts": [PROMPTS[1]], "seed": 9, "num_inference_steps": 150})).unwrap()
        });
        // Wait until it holds the executor (queued or running), then update.
        let t0 = std::time::Instant::now();
        while common::server::metric(&server.metrics(), "fastvideo_in_flight", None) < 1.0 {
            assert!(t0.elapsed().as_secs() < 60, "the long request never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        // The original weights, uploaded as the body this time.
        let r = ureq::post(&server.url("/v1/weights"))
            .header("content-type", "application/octet-stream")
            .send(&initial[..])
            .unwrap();
        let w2: Value = r.into_body().read_json().unwrap();
        assert_eq!((w2["epoch"].as_u64(), w2["source"].as_str()), (Some(2), Some("upload")), "{w2}");
        assert_eq!(w2["hash"], w0["hash"]);
        // Submitted after the swap: epoch 2, the original weights' output again.
        assert!(sample(&server) == (a.clone(), 2), "epoch 2 serves the original weights' output");
        running.join().unwrap()
    });
    assert_eq!(long[0].num("weight_epoch"), 1, "the running request stayed on its epoch");
}

/// A random rank-4 LoRA for the default model's `proj_out` and first FFN output, in diffusers'
/// format.
fn random_lora(dir: &Path) -> PathBuf {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |n: usize, scale: f32| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((((state >> 40) as f32) / (1u64 << 24) as f32 - 0.5) * scale).to_le_bytes()
            })
            .collect()
    };
    let mut bufs = Vec::new();
    for (module, inp, out) in [("proj_out", 128, 64), ("blocks.0.ffn.net.2", 512, 128)] {
        bufs.push((format!("transformer.{module}.lora_A.weight"), vec![4, inp], rand(4 * inp, 0.5)));
        bufs.push((format!("transformer.{module}.lora_B.weight"), vec![out, 4], rand(out * 4, 0.5)));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = bufs
        .iter()
        .map(|(n, s, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
        })
        .collect();
    let path = dir.join("delta.safetensors");
    std::fs::write(&path, safetensors::tensor::serialize(views, None).unwrap()).unwrap();
    path
}

#[test]
fn a_weight_update_may_be_a_lora_delta() {
    let dir = tempfile::tempdir().unwrap();
    let lora = random_lora(dir.path());
    let bytes = std::fs::read(&lora).unwrap();
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let deploy = dir.path().join("deploy.toml");
    std::fs::write(
        &deploy,
        format!("[[adapters]]\nname = \"delta\"\nsource = \"{}\"\nblake3 = \"{hash}\"\n", lora.display()),
    )
    .unwrap();
    let server = Server::start(&["--deploy", deploy.to_str().unwrap()]);
    let sample = |lora: Value| {
        let body = json!({"prompts": [PROMPTS[0]], "seed": 5, "num_inference_steps": 3, "lora": lora});
        let r = rollout(&server, body).unwrap();
        (r[0].f32s("latents"), r[0].num("weight_epoch"))
    };
    let (base, _) = sample(json!([]));
    let (adapted, e) = sample(json!([{"name": "delta", "scale": 1.0}]));
    assert_eq!(e, 0);
    let push = || {
        let r = ureq::post(&server.url("/v1/weights"))
            .header("content-type", "application/octet-stream")
            .send(&bytes[..])
            .unwrap();
        r.into_body().read_json::<Value>().unwrap()
    };
    let w1 = push();
    assert_eq!((w1["epoch"].as_u64(), w1["source"].as_str()), (Some(1), Some("upload")), "{w1}");
    assert_eq!(w1["hash"], hash);
    let (merged, e) = sample(json!([]));
    assert_eq!(e, 1);
    let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let scale = adapted.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(diff(&base, &adapted) > 1e-2 * scale, "the adapter changes the output");
    // Epoch 1 is the start weights with the adapter merged: what the adapter gave at epoch 0.
    assert!(diff(&merged, &adapted) <= 1e-4 * scale, "merged update {} vs adapter {}", diff(&merged, &adapted), scale);
    // A second push replaces the first (adapters do not accumulate).
    assert_eq!(push()["epoch"], 2);
    assert!(sample(json!([])) == (merged, 2));
}
