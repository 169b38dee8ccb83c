//! `fastvideo serve`'s ComfyUI API driven by ComfyUI clients: ComfyUI's own `comfy run`
//! (comfy-cli from PyPI, installed by `host/scripts/comfy-client.sh`) runs the Wan 2.1
//! template unmodified, and a client following ComfyUI's `websockets_api_example.py` checks
//! the protocol step by step: messages and their order, history, `/view`, errors in
//! `node_errors`, uploads, interrupts, and prompts beside OpenAI-API jobs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::comfy::{self, connect, next, until_done, upload};
use crate::common::server::Server;
use serde_json::{json, Value};

fn start(dir: &Path) -> Server {
    let deploy = comfy::deploy(dir);
    let files = dir.join("comfy");
    Server::start(&["--deploy", deploy.to_str().unwrap(), "--comfy-dir", files.to_str().unwrap()])
}

/// The small Wan template in the API format, as ComfyUI's "Export (API)" gives it.
fn api_prompt(dir: &Path, steps: u32) -> Value {
    let file = comfy::small_wan_file(dir, steps);
    let out = Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(["workflow", "parse"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn comfy_cli_runs_the_wan_template_unmodified() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let workflow = comfy::small_wan_file(dir.path(), 6);
    let envelope = comfy::comfy_cli_run(&s, &workflow, dir.path());
    assert_eq!(envelope["data"]["status"], "completed");
    let url = envelope["data"]["outputs_by_node"]["50"][0].as_str().unwrap();
    assert!(url.contains("filename=ComfyUI_00001_.mp4") && url.contains("subfolder=video"), "{url}");
    let bytes = ureq::get(url).call().unwrap().into_body().read_to_vec().unwrap();
    assert_eq!(comfy::mp4_shape(&bytes), (64, 64, 17), "comfy-cli's UI→API conversion used our /object_info");
}

#[test]
fn the_protocol_as_comfyuis_example_client_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let mut ws = connect(&s, "client-1");
    let hello = next(&mut ws);
    assert_eq!(
        hello,
        json!({"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}, "sid": "client-1"}})
    );

    let prompt = api_prompt(dir.path(), 5);
    let (code, r) = s.post("/prompt", json!({"prompt": prompt, "client_id": "client-1", "prompt_id": "p-1"}));
    assert_eq!((code, &r), (200, &json!({"prompt_id": "p-1", "number": 0, "node_errors": {}})));
    let seen = until_done(&mut ws, "p-1");
    let kinds: Vec<&str> = seen.iter().map(|m| m["type"].as_str().unwrap()).filter(|k| *k != "status").collect();
    let mut expected = vec!["execution_start", "execution_cached", "executing"];
    // A sampler preview every 4 steps, as a binary frame (PREVIEW_IMAGE, JPEG) after step 4's
    // progress message.
    expected.extend(["progress"; 3]);
    expected.extend(["binary", "progress", "progress"]);
    expected.extend(["executing", "executed", "execution_success", "executing"]);
    assert_eq!(kinds, expected, "{seen:?}");
    let by = |k: &str| seen.iter().filter(|m| m["type"] == k).map(|m| &m["data"]).collect::<Vec<_>>();
    assert_eq!(by("executing")[0], &json!({"node": "3", "display_node": "3", "prompt_id": "p-1"}));
    let steps: Vec<(u64, u64)> =
        by("progress").iter().map(|p| (p["value"].as_u64().unwrap(), p["max"].as_u64().unwrap())).collect();
    assert_eq!(steps, [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]);
    assert!(by("progress").iter().all(|p| p["node"] == "3" && p["prompt_id"] == "p-1"));
    assert_eq!(by("binary"), [&json!({"event": 1, "format": 1, "jpeg": true})]);
    let file = json!({"filename": "ComfyUI_00001_.mp4", "subfolder": "video", "type": "output"});
    let executed = by("executed")[0];
    assert_eq!(executed["node"], "50");
    assert_eq!(executed["output"], json!({"images": [file], "animated": [true]}), "ComfyUI's SaveVideo shape");
    assert!(by("execution_start")[0]["timestamp"].as_u64().unwrap() > 1_600_000_000_000, "milliseconds");

    let (_, h) = s.get("/history/p-1");
    let rec = &h["p-1"];
    assert_eq!(rec["status"]["status_str"], "success");
    assert_eq!(rec["status"]["completed"], true);
    let logged: Vec<&str> =
        rec["status"]["messages"].as_array().unwrap().iter().map(|m| m[0].as_str().unwrap()).collect();
    assert_eq!(logged, ["execution_start", "execution_cached", "execution_success"]);
    assert_eq!(rec["outputs"]["50"], executed["output"]);
    assert_eq!((rec["prompt"][1].clone(), rec["prompt"][3]["client_id"].clone()), (json!("p-1"), json!("client-1")));
    assert_eq!(rec["prompt"][4], json!(["50"]));
    assert_eq!(s.get("/history/unknown"), (200, json!({})));
    assert_eq!(s.get("/api/history?max_items=1").1.as_object().unwrap().len(), 1, "the /api/ alias");
    assert_eq!(s.get("/queue").1, json!({"queue_running": [], "queue_pending": []}));

    let (code, bytes) = s.bytes("/view?filename=ComfyUI_00001_.mp4&subfolder=video&type=output");
    assert_eq!((code, comfy::mp4_shape(&bytes)), (200, (64, 64, 17)));
    assert_eq!(s.bytes("/view?filename=../x.mp4&type=output").0, 400);
    assert_eq!(s.bytes("/view?filename=x.mp4&subfolder=../..&type=output").0, 403);
    assert_eq!(s.bytes("/view?filename=nope.mp4&type=output").0, 404);
    assert_eq!(s.bytes("/view?filename=x.mp4&type=models").0, 400);

    let info = s.get("/object_info/KSampler").1;
    assert_eq!(info["KSampler"]["input_order"]["required"][1], "seed");
    let unet = s.get("/object_info/UNETLoader").1;
    assert!(unet["UNETLoader"]["input"]["required"]["unet_name"][1]["options"]
        .as_array()
        .unwrap()
        .contains(&json!("wan2.1_t2v_1.3B_fp16.safetensors")));
    let stats = s.get("/system_stats").1;
    assert_eq!((stats["system"]["os"].clone(), stats["devices"][0]["type"].clone()), (json!("posix"), json!("cpu")));
}

#[test]
fn bad_prompts_get_comfyuis_node_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let good = api_prompt(dir.path(), 2);

    let (code, r) = s.post("/prompt", json!({"client_id": "c"}));
    assert_eq!((code, r["error"]["type"].clone()), (400, json!("no_prompt")));

    let mut p = good.clone();
    p["3"]["inputs"]["sampler_name"] = json!("dpmpp_2m");
    let (code, r) = s.post("/prompt", json!({"prompt": p}));
    assert_eq!((code, r["error"]["type"].clone()), (400, json!("prompt_outputs_failed_validation")));
    let e = &r["node_errors"]["3"];
    assert_eq!(e["class_type"], "KSampler");
    assert!(
        e["errors"][0]["message"].as_str().unwrap().contains("sampler `dpmpp_2m` is not one this runtime runs"),
        "{r}"
    );

    let mut p = good.clone();
    p["99"] = json!({"class_type": "FluxGuidance", "inputs": {}});
    let (code, r) = s.post("/prompt", json!({"prompt": p}));
    assert_eq!(code, 400);
    assert_eq!(r["error"]["type"], "invalid_prompt");
    assert_eq!(r["error"]["message"], "Cannot execute because node FluxGuidance does not exist.");
    assert_eq!(r["node_errors"]["99"]["class_type"], "FluxGuidance");

    // The model's limits, at the node that set the value.
    let mut p = good.clone();
    p["40"]["inputs"]["width"] = json!(832);
    let (code, r) = s.post("/prompt", json!({"prompt": p}));
    assert_eq!(code, 400);
    assert!(r["node_errors"]["40"]["errors"][0]["message"].as_str().unwrap().contains("diffusion.width: 832"), "{r}");

    // A model file this server does not serve.
    let mut p = good;
    p["37"]["inputs"]["unet_name"] = json!("flux1-dev.safetensors");
    let (code, r) = s.post("/prompt", json!({"prompt": p}));
    assert_eq!(code, 400);
    assert!(r["node_errors"]["37"]["errors"][0]["message"].as_str().unwrap().contains("not mapped"), "{r}");
    assert_eq!(s.get("/queue").1["queue_pending"], json!([]), "nothing refused was queued");

    // Without translators in the deploy the API is off, and says how to turn it on.
    let plain = Server::start(&[]);
    let (code, r) = plain.get("/prompt");
    assert_eq!((code, r["error"]["type"].clone()), (404, json!("not_enabled")));
    assert!(r["error"]["message"].as_str().unwrap().contains("workflow translators"), "{r}");
}

#[test]
fn uploads_interrupts_and_prompts_beside_openai_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    assert_eq!(upload(&s, ("cat.png", b"one"), &[]), json!({"name": "cat.png", "subfolder": "", "type": "input"}));
    assert_eq!(
        upload(&s, ("cat.png", b"one"), &[]),
        json!({"name": "cat.png", "subfolder": "", "type": "input"}),
        "same bytes"
    );
    assert_eq!(upload(&s, ("cat.png", b"two"), &[("subfolder", "")])["name"], "cat (1).png");
    assert_eq!(upload(&s, ("cat.png", b"three"), &[("overwrite", "true")])["name"], "cat.png");
    assert_eq!(s.bytes("/view?filename=cat.png&type=input"), (200, b"three".to_vec()));

    // A long prompt, interrupted once it is denoising.
    let mut ws = connect(&s, "c2");
    let (_, r) = s.post("/prompt", json!({"prompt": api_prompt(dir.path(), 400), "client_id": "c2"}));
    let id = r["prompt_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 36, "a uuid: {id}");
    loop {
        let m = next(&mut ws);
        if m["type"] == "progress" {
            break;
        }
    }
    let running = s.get("/queue").1;
    assert_eq!(running["queue_running"][0][1], json!(id));
    let r = ureq::post(&s.url("/interrupt")).send_json(json!({})).unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let seen = until_done(&mut ws, &id);
    let stopped = seen.iter().find(|m| m["type"] == "execution_interrupted").expect("interrupted");
    assert_eq!(
        (stopped["data"]["node_id"].clone(), stopped["data"]["node_type"].clone()),
        (json!("3"), json!("KSampler"))
    );
    let rec = &s.get(&format!("/history/{id}")).1[&id];
    assert_eq!(
        (rec["status"]["status_str"].clone(), rec["status"]["completed"].clone()),
        (json!("error"), json!(false))
    );

    // A prompt and an OpenAI-API job at once, through the same step scheduler.
    let t0 = Instant::now();
    let (_, job) =
        s.post("/v1/videos", json!({"prompt": "a red circle moving left on a white background", "seconds": "1"}));
    let (_, r) = s.post("/prompt", json!({"prompt": api_prompt(dir.path(), 8), "client_id": "c2"}));
    let pid = r["prompt_id"].as_str().unwrap().to_string();
    until_done(&mut ws, &pid);
    let done = s.wait_done(job["id"].as_str().unwrap());
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(s.get(&format!("/history/{pid}")).1[&pid]["status"]["status_str"], "success");
    assert!(t0.elapsed() < Duration::from_secs(120));
}

/// With two models served, a workflow's loaders pick the one their files map to: the template's
/// files map to the second model's folder, which sleeps under a bound of one resident model, so
/// the prompt wakes it.
#[test]
fn a_workflows_loaders_pick_among_the_served_models() {
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default");
    let status = Command::new("cp").arg("-r").arg(&shipped).arg(&second).status().unwrap();
    assert!(status.success());
    let mut models = String::new();
    for f in ["wan2.1_t2v_1.3B_fp16.safetensors", "umt5_xxl_fp8_e4m3fn_scaled.safetensors", "wan_2.1_vae.safetensors"] {
        models += &format!("\"{f}\" = \"second\"\n");
    }
    let deploy = comfy::deploy_with(dir.path(), &[("fastvideo_translator_comfy_core", "comfy-core")], &models);
    let files = dir.path().join("comfy");
    let (primary, other) = (shipped.display().to_string(), format!("second={}", second.display()));
    let s = Server::start(&[
        "--deploy",
        deploy.to_str().unwrap(),
        "--comfy-dir",
        files.to_str().unwrap(),
        "--model",
        &primary,
        "--model",
        &other,
        "--max-resident-models",
        "1",
    ]);
    let mut ws = connect(&s, "picker");
    let prompt = api_prompt(dir.path(), 2);
    let (code, r) = s.post("/prompt", json!({"prompt": prompt, "client_id": "picker", "prompt_id": "pick-1"}));
    assert_eq!(code, 200, "{r}");
    until_done(&mut ws, "pick-1");
    assert_eq!(s.get("/history/pick-1").1["pick-1"]["status"]["status_str"], "success");
    let wakes = crate::common::server::metric(&s.metrics(), "fastvideo_model_wakes_total", Some(("model", "second")));
    assert!(wakes >= 1.0, "the prompt ran on `second` ({wakes} wakes)");
}

/// ComfyUI's frontend in a real browser, as its `api.js` does it: a WebSocket with
/// `binaryType = "arraybuffer"`, a prompt posted with fetch, and each binary frame read as a
/// big-endian event type (1: preview image) and image type (1: JPEG) before the image, which
/// Chromium must decode. Eight steps: previews after steps 4 and 8.
#[test]
fn chromium_sees_sampler_previews_as_comfyuis_frontend_does() {
    use crate::common::browser::Browser;
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let prompt = api_prompt(dir.path(), 8);
    let browser = Browser::launch();
    let mut tab = browser.open(&s.url("/system_stats"));
    tab.wait_for("location.protocol === 'http:' && document.readyState === 'complete'", Duration::from_secs(20));
    let script = format!(
        r#"new Promise((resolve, reject) => {{
  const previews = [];
  const ws = new WebSocket(location.origin.replace('http', 'ws') + '/ws?clientId=browser');
  ws.binaryType = 'arraybuffer';
  ws.onerror = () => reject('websocket error');
  ws.onmessage = async (ev) => {{
    if (typeof ev.data !== 'string') {{
      const view = new DataView(ev.data);
      const [event, format] = [view.getUint32(0), view.getUint32(4)];
      const blob = new Blob([ev.data.slice(8)], {{type: format === 1 ? 'image/jpeg' : 'image/png'}});
      const bitmap = await createImageBitmap(blob);
      previews.push({{event, format, width: bitmap.width, height: bitmap.height}});
      return;
    }}
    const m = JSON.parse(ev.data);
    if (m.type === 'executing' && m.data.node === null && m.data.prompt_id === 'browser-1') {{
      ws.close();
      resolve(previews);
    }}
  }};
  ws.onopen = () => fetch('/prompt', {{method: 'POST', headers: {{'content-type': 'application/json'}},
    body: JSON.stringify({{prompt: {prompt}, client_id: 'browser', prompt_id: 'browser-1'}})}});
  setTimeout(() => reject('no end of the prompt within 120 s'), 120000);
}})"#
    );
    let previews = tab.eval(&script).expect("the page ran the prompt");
    let want = json!({"event": 1, "format": 1, "width": 64, "height": 64});
    assert_eq!(previews, json!([want, want]), "two decoded JPEG previews of the 64x64 video");
}
