//! Hostile and malformed input against the router in process, surface by surface: bodies over
//! the limit, media fields that do not decode, LoRA scales that are no number, webhooks of a
//! deleted job, chat roles no template knows. Each must be a clear refusal naming the field the
//! client sent (never an internal one), and the server must stay up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{get, json, multipart, rt, send, state};
use axum::http::StatusCode;
use axum::Router;
use base64::Engine as _;
use fastvideo_request::chat::ChatCodec;
use fastvideo_request::RequestError;
use fastvideo_server::{router, ComfyConfig, DeviceInfo, RetrySchedule, WebhookPolicy};
use serde_json::{json as j, Value};

/// A language model's codec without a model: a prompt is the messages' text. Its template
/// names one role beyond the standard ones.
struct FakeLm;

impl ChatCodec for FakeLm {
    fn prompt(&self, messages: &Value) -> Result<String, RequestError> {
        Ok(messages.to_string())
    }
    fn count(&self, text: &str) -> Result<usize, RequestError> {
        Ok(text.len())
    }
    fn decode(&self, _: &[i64]) -> String {
        String::new()
    }
    fn template_source(&self) -> Option<&str> {
        Some("{% for m in messages %}{% if m.role == 'narrator' %}{{ m.content }}{% endif %}{% endfor %}")
    }
}

fn param(e: &Value) -> &str {
    e["error"]["param"].as_str().unwrap_or_default()
}

async fn healthy(app: &Router) {
    assert_eq!(send(app, get("/health")).await.0, StatusCode::OK, "the server stays up");
}

#[test]
fn bodies_over_the_limit_are_413s_with_a_json_error_on_every_route() {
    rt().block_on(async {
        let comfy_root = tempfile::tempdir().unwrap();
        let comfy = ComfyConfig {
            translators: Default::default(),
            models: Default::default(),
            serves: Arc::new(|_| None),
            root: comfy_root.path().to_path_buf(),
            device: DeviceInfo::default(),
        };
        let limit = 64 << 10;
        let app =
            router(state().with_body_limit(limit).with_chat("toy-lm".into(), Arc::new(FakeLm)).with_comfyui(comfy));
        let big = vec![b'a'; limit + 1024];
        let text = String::from_utf8(big.clone()).unwrap();
        let cases = [
            (
                "/v1/files multipart",
                multipart("/v1/files", &[("purpose", None, b"vision"), ("file", Some("a.png"), &big)]),
            ),
            ("/v1/videos JSON", json("POST", "/v1/videos", j!({"prompt": text}).to_string())),
            (
                "/v1/videos multipart",
                multipart("/v1/videos", &[("prompt", None, b"x"), ("input_reference", Some("a.png"), &big)]),
            ),
            ("/v1/images/generations JSON", json("POST", "/v1/images/generations", j!({"prompt": text}).to_string())),
            (
                "/v1/chat/completions JSON",
                json("POST", "/v1/chat/completions", j!({"messages": [{"role": "user", "content": text}]}).to_string()),
            ),
            ("/upload/image multipart", multipart("/upload/image", &[("image", Some("a.png"), &big)])),
        ];
        for (what, req) in cases {
            let (status, e) = send(&app, req).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{what}: {e}");
            assert_eq!(e["error"]["code"], "payload_too_large", "{what}: {e}");
            assert_eq!(e["error"]["type"], "invalid_request_error", "{what}: {e}");
            assert!(e["error"]["message"].as_str().unwrap().contains("size limit of 65536 bytes"), "{what}: {e}");
        }
        // Under the limit, the same routes read their bodies.
        let (status, f) = send(&app, multipart("/v1/files", &[("file", Some("a.png"), &big[..1024])])).await;
        assert_eq!((status, &f["bytes"]), (StatusCode::OK, &j!(1024)), "{f}");
        healthy(&app).await;
    });
}

#[test]
fn media_errors_name_the_field_the_client_sent() {
    rt().block_on(async {
        let app = router(state());
        let cases = [
            (j!({"prompt": "x", "input_reference": "!!! not base64 !!!"}), "input_reference"),
            (j!({"prompt": "x", "input_reference": {"b64": "%%%"}}), "input_reference"),
            (j!({"prompt": "x", "video": "%%%"}), "video"),
            (j!({"prompt": "x", "input_reference": "data:image/png,iVBORw0KGgo"}), "input_reference"),
            (j!({"prompt": "x", "video": "data:video/mp4;charset=utf-8,AAAA"}), "video"),
            (j!({"prompt": "x", "input_reference": "file-abc/../../etc/passwd"}), "input_reference"),
            (j!({"prompt": "x", "video": "file-"}), "video"),
            (j!({"prompt": "x", "input_reference": "file-nosuchupload"}), "input_reference"),
        ];
        for (body, field) in cases {
            let (status, e) = send(&app, json("POST", "/v1/videos", body.to_string())).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, field), "{body}: {e}");
            let message = e["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(field) && !message.contains("inputs["), "{body}: {e}");
        }
        // Forms: the same fields as text, and as files.
        for (fields, field) in [
            (vec![("input_reference", None, b"%%%".as_slice())], "input_reference"),
            (vec![("video", None, b"data:video/mp4,xyz".as_slice())], "video"),
            (vec![("input_reference", None, b"file-a.b".as_slice())], "input_reference"),
            (vec![("video", Some("v.mp4"), b"not a video".as_slice())], "video"),
        ] {
            let mut all = vec![("prompt", None, b"x".as_slice())];
            all.extend(fields);
            let (status, e) = send(&app, multipart("/v1/videos", &all)).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, field), "{e}");
        }
        healthy(&app).await;
    });
}

#[test]
fn non_finite_lora_scales_are_400s_naming_the_scale_in_json_and_forms() {
    rt().block_on(async {
        let app = router(state());
        for scale in [j!("NaN"), j!("nan"), j!("inf"), j!("-Infinity"), j!("0.5x"), j!(true)] {
            let body = j!({"prompt": "x", "lora": [{"name": "style", "scale": scale}]});
            let (status, e) = send(&app, json("POST", "/v1/videos", body.to_string())).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, "lora[0].scale"), "{scale}: {e}");
        }
        for fields in [
            [("lora[0][name]", "style"), ("lora[0][scale]", "NaN")],
            [("lora[][name]", "style"), ("lora[][scale]", "inf")],
            [("lora[0][name]", "style"), ("lora[0][scale]", " -inf ")],
        ] {
            let mut all: Vec<(&str, Option<&str>, &[u8])> = vec![("prompt", None, b"x")];
            all.extend(fields.iter().map(|(k, v)| (*k, None, v.as_bytes())));
            let (status, e) = send(&app, multipart("/v1/videos", &all)).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, "lora[0].scale"), "{fields:?}: {e}");
            // The parser the fuzz targets and other front ends use agrees.
            let mut pairs = vec![("prompt", "x")];
            pairs.extend(fields);
            let limits = fastvideo_request::ModelLimits::example();
            match fastvideo_server::video_request_from_form(&pairs, &limits) {
                Err(fastvideo_server::ApiError::BadRequest { param, .. }) => {
                    assert_eq!(param.as_deref(), Some("lora[0].scale"))
                }
                other => panic!("{fields:?}: {other:?}"),
            }
        }
        // A scale as text that is a number is read as that number: this server enables no
        // adapters, so the refusal is about the name, not the scale.
        let (status, e) = send(
            &app,
            multipart(
                "/v1/videos",
                &[("prompt", None, b"x"), ("lora[0][name]", None, b"style"), ("lora[0][scale]", None, b"0.5")],
            ),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert_ne!(param(&e), "lora[0].scale", "{e}");
        healthy(&app).await;
    });
}

#[test]
fn chat_roles_no_template_knows_are_400s_naming_the_message() {
    rt().block_on(async {
        let app = router(state().with_chat("toy-lm".into(), Arc::new(FakeLm)));
        let chat = |roles: &[&str]| {
            let messages: Vec<Value> = roles.iter().map(|r| j!({"role": r, "content": "hi"})).collect();
            json("POST", "/v1/chat/completions", j!({"messages": messages, "max_tokens": 4}).to_string())
        };
        for (roles, field) in [
            (&["wizard"][..], "messages[0].role"),
            (&["system", "user", "wizard"][..], "messages[2].role"),
            (&["USER"][..], "messages[0].role"),
            (&["user", ""][..], "messages[1].role"),
        ] {
            let (status, e) = send(&app, chat(roles)).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, field), "{roles:?}: {e}");
        }
        // Standard roles, and one the template names, pass the role check (the fake model then
        // has no engine behind it, which is another error).
        for roles in [&["system", "developer", "user", "assistant", "tool"][..], &["narrator", "user"][..]] {
            let (_, e) = send(&app, chat(roles)).await;
            assert!(!param(&e).ends_with(".role"), "{roles:?}: {e}");
        }
        healthy(&app).await;
    });
}

/// An HTTP receiver that fails every delivery (so the server retries), counting them.
fn failing_receiver(rt: &tokio::runtime::Runtime) -> (u16, Arc<AtomicUsize>) {
    let got = Arc::new(AtomicUsize::new(0));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = got.clone();
    let app = Router::new().route(
        "/hooks/{*rest}",
        axum::routing::post(move || async move {
            count.fetch_add(1, Ordering::SeqCst);
            StatusCode::SERVICE_UNAVAILABLE
        }),
    );
    rt.spawn(async move { axum::serve(listener, app).await });
    (port, got)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn deleting_a_job_stops_its_pending_webhook_retries() {
    let rt = rt();
    let (port, got) = failing_receiver(&rt);
    rt.block_on(async {
        let secret = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
        let policy = WebhookPolicy::new(&[format!("http://127.0.0.1:{port}/hooks")]).unwrap();
        // Retries 3 s apart: time to delete the job between two attempts.
        let schedule = RetrySchedule {
            first: Duration::from_secs(3),
            max: Duration::from_secs(3),
            window: Duration::from_secs(600),
        };
        let app = router(state().with_webhooks(policy, &secret, schedule).unwrap());
        let body = j!({"prompt": "x", "num_inference_steps": 2, "webhook": format!("http://127.0.0.1:{port}/hooks/a")});
        let (status, job) = send(&app, json("POST", "/v1/videos", body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        // The job ends (failed: the toy makes no video), and its first delivery fails.
        let mut hook = Value::Null;
        for _ in 0..500 {
            hook = send(&app, get(&format!("/v1/videos/{id}"))).await.1["webhook"].clone();
            if hook["attempts"].as_u64() >= Some(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!((&hook["status"], &hook["attempts"]), (&j!("pending"), &j!(1)), "{hook}");
        let next = hook["next_attempt_at"].as_u64().expect("a retry is scheduled");
        let (status, deleted) = send(&app, crate::common::delete(&format!("/v1/videos/{id}"))).await;
        assert_eq!(status, StatusCode::OK, "{deleted}");
        let before = got.load(Ordering::SeqCst);
        assert_eq!(before, 1, "one attempt before the delete");
        // Past the time the retry was due (and its attempt's 10 s timeout cannot be in play:
        // the receiver answers at once).
        while unix_now() <= next + 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(got.load(Ordering::SeqCst), before, "no delivery after the DELETE");
        healthy(&app).await;
    });
}

#[test]
fn a_picture_of_an_extreme_shape_is_refused_at_admission_naming_the_field() {
    // A 40000×1 picture (under the pixel limit) padded to the output panicked inside the job;
    // it is refused before the job is queued, naming the field the client sent.
    rt().block_on(async {
        let app = router(state());
        let strip = |width: u32| {
            let video = fastvideo_request::VideoArtifact {
                fps: 1,
                num_frames: 1,
                height: 1,
                width,
                rgb: vec![200; width as usize * 3],
            };
            fastvideo_media::png_bytes(&video, 0).unwrap()
        };
        // (Cropped, the same strip is a 1×1 picture scaled up: bounded work, accepted.)
        for (width, mode) in [(40_000, "pad"), (20_000, "pad"), (40_000, "stretch")] {
            let b64 = base64::engine::general_purpose::STANDARD.encode(strip(width));
            let body = j!({"prompt": "x", "input_reference": format!("data:image/png;base64,{b64}"),
                "resize_mode": mode, "size": "64x64", "num_frames": 5});
            let (status, e) = send(&app, json("POST", "/v1/videos", body.to_string())).await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, "input_reference"), "{width} {mode}: {e}");
            let (status, e) = send(
                &app,
                multipart(
                    "/v1/videos",
                    &[
                        ("prompt", None, b"x"),
                        ("resize_mode", None, mode.as_bytes()),
                        ("size", None, b"64x64"),
                        ("input_reference", Some("strip.png"), &strip(width)),
                    ],
                ),
            )
            .await;
            assert_eq!((status, param(&e)), (StatusCode::BAD_REQUEST, "input_reference"), "{width} {mode}: {e}");
        }
        healthy(&app).await;
    });
}
