//! `POST /prompt`: a workflow compiled and checked before it is queued (errors in ComfyUI's
//! `node_errors` shape), then run through the engine's step scheduler beside OpenAI-API jobs,
//! with ComfyUI's WebSocket messages along the way and a history record at the end.

use std::collections::BTreeMap;
use std::sync::Arc;

use fastvideo_comfy::{compile, next_output, CompileError, RunPlan, WorkflowError};
use fastvideo_request::{OmniEvent, OmniRequest};
use serde_json::{json, Value};

use super::queue::Entry;
use super::service::Comfy;
use crate::state::AppState;

/// Milliseconds since the epoch, as ComfyUI stamps its messages.
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// ComfyUI's error object.
fn error(kind: &str, message: &str, details: &str) -> Value {
    json!({ "type": kind, "message": message, "details": details, "extra_info": {} })
}

/// A refused prompt: `(error, node_errors)` as ComfyUI's `validate_prompt` answers.
pub struct Refusal {
    /// The top-level error.
    pub error: Value,
    /// Per node: `{"errors": [...], "dependent_outputs": [...], "class_type": ...}`.
    pub node_errors: Value,
}

impl Refusal {
    fn at(node: &str, class_type: &str, kind: &str, message: &str, outputs: &[String]) -> Self {
        let node_errors = json!({ node: {
            "errors": [error(kind, message, message)],
            "dependent_outputs": outputs,
            "class_type": class_type,
        }});
        Refusal {
            error: error("prompt_outputs_failed_validation", "Prompt outputs failed validation", message),
            node_errors,
        }
    }

    /// A loader's input that cannot be used (a missing or bad file), as ComfyUI's
    /// `custom_validation_failed` for `LoadImage`'s "Invalid image file".
    fn input(node: &str, class_type: &str, input: &str, message: &str, outputs: &[String]) -> Self {
        let details = format!("{input} - {message}");
        let node_errors = json!({ node: {
            "errors": [{
                "type": "custom_validation_failed",
                "message": "Custom validation failed for node",
                "details": details,
                "extra_info": { "input_name": input },
            }],
            "dependent_outputs": outputs,
            "class_type": class_type,
        }});
        let whole = format!("node {node}: {input}: {message}");
        Refusal {
            error: error("prompt_outputs_failed_validation", "Prompt outputs failed validation", &whole),
            node_errors,
        }
    }
}

/// What a checked prompt runs.
pub struct Checked {
    /// One engine request per run.
    pub runs: Vec<(RunPlan, OmniRequest)>,
    /// Node id → class type, for messages.
    pub class_types: BTreeMap<String, String>,
    /// The output nodes.
    pub outputs: Vec<String>,
}

/// Compiles and checks `prompt` against the served model, reading the pictures and videos it
/// loads from the input folder (blocking: run it off the async threads).
pub fn check(c: &Comfy, s: &AppState, prompt: &Value, prompt_id: &str) -> Result<Checked, Refusal> {
    let class_of = |id: &str| {
        prompt.get(id).and_then(|n| n.get("class_type")).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    let compiled = compile(&json!({ "prompt": prompt }), &c.cfg.translators).map_err(|e| match &e {
        CompileError::Untranslated(missing) => {
            let (id, ty) = &missing[0];
            let msg = format!("Cannot execute because node {ty} does not exist.");
            let mut node_errors = serde_json::Map::new();
            for (id, ty) in missing {
                let m = format!("no translator handles node type {ty}");
                node_errors.insert(
                    id.clone(),
                    json!({ "errors": [error("invalid_prompt", &m, &m)], "dependent_outputs": [], "class_type": ty }),
                );
            }
            Refusal {
                error: error("invalid_prompt", &msg, &format!("Node ID '#{id}'")),
                node_errors: Value::Object(node_errors),
            }
        }
        CompileError::Workflow(WorkflowError { node: Some(id), .. }) | CompileError::Node { node: id, .. } => {
            Refusal::at(id, &class_of(id), "invalid_input", &e.to_string(), &[])
        }
        CompileError::Translator { node, class_type, .. } => {
            Refusal::at(node, class_type, "invalid_input", &e.to_string(), &[])
        }
        CompileError::Graph(m) => {
            Refusal { error: error("prompt_no_outputs", "Prompt has no outputs", m), node_errors: json!({}) }
        }
        other => {
            Refusal { error: error("invalid_prompt", &other.to_string(), &other.to_string()), node_errors: json!({}) }
        }
    })?;
    let class_types: BTreeMap<String, String> =
        compiled.workflow.nodes.iter().map(|n| (n.id.clone(), n.class_type.clone())).collect();
    let ty = |id: &str| class_types.get(id).cloned().unwrap_or_default();
    let outputs: Vec<String> = compiled.runs.iter().flat_map(|r| r.outputs.iter().map(|o| o.node.clone())).collect();
    let mut runs = Vec::new();
    for (i, plan) in compiled.runs.into_iter().enumerate() {
        let outs: Vec<String> = plan.outputs.iter().map(|o| o.node.clone()).collect();
        let refuse = |e: CompileError| match &e {
            CompileError::Node { node, message } => Refusal::at(node, &ty(node), "invalid_input", message, &outs),
            CompileError::Input { node, input, message } => Refusal::input(node, &ty(node), input, message, &outs),
            other => {
                Refusal::at(&plan.sampler_node, &ty(&plan.sampler_node), "invalid_input", &other.to_string(), &outs)
            }
        };
        let folders = c.cfg.models.folders_for(&plan).map_err(refuse)?;
        let served = folders.iter().find_map(|f| (c.cfg.serves)(f));
        let Some(model) = served else {
            // Name the model's loader: the file that picks the folder.
            let model = plan.files.iter().find(|f| matches!(f.role, "diffusion_model" | "checkpoint"));
            let f = model.or(plan.files.first()).map_or_else(|| plan.sampler_node.clone(), |f| f.node.clone());
            let ids: Vec<&str> = s.engine.models().iter().map(|(id, _)| *id).collect();
            let msg = format!(
                "its model files map to `{}`, which this server does not serve (it serves {})",
                folders.join("`, `"),
                ids.join(", ")
            );
            return Err(Refusal::at(&f, &ty(&f), "value_not_in_list", &msg, &outs));
        };
        let mut req = plan.request(&format!("comfy_{prompt_id}_{i}"), &c.cfg.root.join("input")).map_err(refuse)?;
        // The loaders' files pick among the served models.
        req.model = (model != s.engine.model_id()).then(|| model.clone());
        let limits = s.engine.limits_of(&model).unwrap_or(s.engine.limits()).clone();
        // The request's own checks, then its LoRA loaders' files against the deploy's adapters
        // (what the engine checks at admission, here so the loader node gets the error).
        let checked = req.resolve(&limits, || plan.seed).and_then(|r| {
            match (r.lora.is_empty(), s.engine.adapters(Some(&model))) {
                (true, _) => Ok(()),
                (false, Some(cache)) => cache.check(&r.lora),
                (false, None) => Err(fastvideo_request::RequestError::new(
                    "lora[0].name",
                    "this server enables no LoRA adapters ([[adapters]] in the deploy)",
                )),
            }
        });
        if let Err(e) = checked {
            let node = plan.node_of(&e.field).to_string();
            return Err(Refusal::at(&node, &ty(&node), "value_not_in_list", &e.to_string(), &outs));
        }
        runs.push((plan, req));
    }
    Ok(Checked { runs, class_types, outputs })
}

/// Denoise steps between the previews a ComfyUI prompt's sampler sends.
pub const COMFY_PREVIEW_EVERY: u32 = 4;

/// Runs a queued prompt to its end; every outcome lands in the history and on the WebSocket.
pub async fn run(c: Arc<Comfy>, s: AppState, entry: Entry, checked: Checked) {
    let id = entry.prompt_id.clone();
    let sid = entry.client_id().map(String::from);
    let to = sid.as_deref();
    let mut messages: Vec<Value> = Vec::new();
    // As ComfyUI: execution messages go to the posting client only (none without a client id);
    // progress and interrupts to it, or to everyone when it gave none. Kept ones go to history.
    let mut send = |kind: &str, data: Value, keep: bool| {
        let everyone = matches!(kind, "progress" | "execution_interrupted");
        if to.is_some() || everyone {
            c.queue.send(kind, &data, to);
        }
        if keep {
            messages.push(json!([kind, data]));
        }
    };
    if !c.queue.start(&id) {
        return; // deleted from the queue before it started
    }
    c.queue.broadcast_status();
    send("execution_start", json!({ "prompt_id": id, "timestamp": now_ms() }), true);
    send("execution_cached", json!({ "nodes": [], "prompt_id": id, "timestamp": now_ms() }), true);
    let mut outputs = serde_json::Map::new();
    let mut executed: Vec<String> = Vec::new();
    let mut failure: Option<(String, String, String)> = None; // (node, kind, message)
    'runs: for (plan, mut req) in checked.runs {
        // ComfyUI's frontend shows sampler previews as they come.
        req.outputs.preview_every.get_or_insert(COMFY_PREVIEW_EVERY);
        let node = plan.sampler_node.clone();
        if !c.queue.add_request(&id, &req.request_id) {
            failure = Some((node, "interrupted".into(), "interrupted".into()));
            break;
        }
        let mut handle = match s.engine.submit(req) {
            Ok(h) => h,
            Err(e) => {
                failure = Some((node, e.code().to_string(), e.to_string()));
                break;
            }
        };
        send("executing", json!({ "node": node, "display_node": node, "prompt_id": id }), false);
        while let Some(ev) = handle.events.recv().await {
            match ev {
                OmniEvent::Progress { step, total_steps, .. } => {
                    let data = json!({ "value": step, "max": total_steps, "prompt_id": id, "node": node });
                    send("progress", data, false);
                }
                // As ComfyUI sends its sampler previews: binary frames, to the client or to all.
                OmniEvent::Preview { jpeg_b64, .. } => {
                    use base64::Engine as _;
                    if let Ok(jpeg) = base64::engine::general_purpose::STANDARD.decode(jpeg_b64) {
                        c.queue.send_out(super::queue::preview_frame(&jpeg), to);
                    }
                }
                _ => {}
            }
        }
        let out = match handle.output.await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                failure = Some((node, e.code().to_string(), e.to_string()));
                break;
            }
            Err(_) => {
                failure = Some((node, "stopped".into(), "the engine stopped".into()));
                break;
            }
        };
        executed.push(node.clone());
        let Some(video) = out.video().cloned() else {
            failure = Some((node, "no_video".into(), "the pipeline produced no video".into()));
            break;
        };
        for o in &plan.outputs {
            send("executing", json!({ "node": o.node, "display_node": o.node, "prompt_id": id }), false);
            // The sound goes into the MP4 when the workflow's CreateVideo takes it.
            let audio = out.audio().filter(|_| o.audio).cloned();
            match write_output(&c, &video, audio, o.kind, &o.prefix).await {
                Ok(file) => {
                    let output = if o.kind == "video" {
                        json!({ "images": [file], "animated": [true] })
                    } else {
                        json!({ "images": [file] })
                    };
                    outputs.insert(o.node.clone(), output.clone());
                    executed.push(o.node.clone());
                    let data = json!({ "node": o.node, "display_node": o.node, "output": output, "prompt_id": id });
                    send("executed", data, false);
                }
                Err(e) => {
                    failure = Some((o.node.clone(), "output_failed".into(), e));
                    break 'runs;
                }
            }
        }
    }
    let interrupted = c.queue.interrupted(&id);
    let status = match failure {
        None => {
            send("execution_success", json!({ "prompt_id": id, "timestamp": now_ms() }), true);
            "success"
        }
        Some((node, kind, message)) => {
            let node_type = checked.class_types.get(&node).cloned().unwrap_or_default();
            let base = json!({ "prompt_id": id, "node_id": node, "node_type": node_type, "executed": executed, "timestamp": now_ms() });
            if interrupted || kind == "cancelled" || kind == "interrupted" {
                send("execution_interrupted", base, true);
            } else {
                let mut data = base;
                data["exception_message"] = json!(message);
                data["exception_type"] = json!(kind);
                data["traceback"] = json!([]);
                data["current_inputs"] = json!({});
                data["current_outputs"] = json!({});
                send("execution_error", data, true);
            }
            "error"
        }
    };
    let meta: serde_json::Map<String, Value> = outputs
        .keys()
        .map(|n| (n.clone(), json!({ "node_id": n, "display_node": n, "parent_node": null, "real_node_id": n })))
        .collect();
    let record = json!({
        "prompt": entry.tuple(),
        "outputs": outputs,
        "status": { "status_str": status, "completed": status == "success", "messages": messages },
        "meta": meta,
    });
    c.queue.finish(&id, record);
    c.queue.broadcast_status();
    if to.is_some() {
        c.queue.send("executing", &json!({ "node": null, "prompt_id": id }), to);
    }
}

/// Encodes and writes one output under the output folder; ComfyUI's file object for it.
async fn write_output(
    c: &Comfy,
    video: &fastvideo_request::VideoArtifact,
    audio: Option<fastvideo_request::AudioArtifact>,
    kind: &str,
    prefix: &str,
) -> Result<Value, String> {
    let root = c.cfg.root.join("output");
    let (ext, video) = (if kind == "video" { "mp4" } else { "png" }, video.clone());
    let bytes = tokio::task::spawn_blocking(move || {
        if ext == "mp4" {
            fastvideo_media::mp4_bytes_with_audio(&video, audio.as_ref())
        } else if video.num_frames == 1 {
            fastvideo_media::png_bytes(&video, 0)
        } else {
            anyhow::bail!("SaveImage of a {}-frame video; use SaveVideo", video.num_frames)
        }
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("{e:#}"))?;
    // One writer at a time picks the next counter, so two prompts never take one name.
    let _guard = c.writing.lock().await;
    let name = next_output(&root, prefix, ext)?;
    let path = name.path(&root);
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    tokio::fs::write(&path, bytes).await.map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(json!({ "filename": name.filename, "subfolder": name.subfolder, "type": "output" }))
}
