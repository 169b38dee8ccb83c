//! Hostile and malformed input against the router in process, surface by surface: bodies over
//! the limit, media fields that do not decode, LoRA scales that are no number, webhooks of a
//! deleted job, chat roles no template knows. Each must be a clear refusal naming the field the
//! client sent (never an internal one), and the server must stay up.

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::Router;
use common::{get, json, multipart, rt, send, state};
use fastvideo_request::chat::ChatCodec;
use fastvideo_request::RequestError;
use fastvideo_server::{router, ComfyConfig, DeviceInfo};
use serde_json::{json as j, Value};

/// A language model's codec without a model: a prompt is the messages' text.
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
