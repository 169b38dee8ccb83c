//! The router in process (`tower::ServiceExt::oneshot`, no socket, no binary), over an engine
//! running a toy pipeline: what a client gets for health, keys, unknown routes, bad fields and a
//! job's life, without a model. The CLI's suite drives the real binary over HTTP on top of this.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use fastvideo_request::{ModelLimits, TaskType};
use fastvideo_server::{router, ApiKeys};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{toy_state, Idle};

fn app(keys: &[&str]) -> Router {
    app_with(keys, ModelLimits { tasks: vec![TaskType::T2v, TaskType::T2i], ..ModelLimits::example() })
}

fn app_with(keys: &[&str], limits: ModelLimits) -> Router {
    let state = toy_state(limits, Arc::new(Idle(Duration::from_millis(20))), &["video"]);
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    router(state.with_api_keys(ApiKeys::new(&keys, false).unwrap()))
}

async fn call(app: &Router, method: &str, uri: &str, key: Option<&str>, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let req = match body {
        Some(b) => req.header("content-type", "application/json").body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn health_models_and_unknown_routes_answer_in_json() {
    rt().block_on(async {
        let app = app(&[]);
        assert_eq!(call(&app, "GET", "/health", None, None).await, (StatusCode::OK, json!({"status": "ok"})));
        let (s, ready) = call(&app, "GET", "/ready", None, None).await;
        assert_eq!((s, &ready["status"]), (StatusCode::OK, &json!("ready")));
        let (s, models) = call(&app, "GET", "/v1/models", None, None).await;
        assert_eq!((s, &models["data"][0]["id"]), (StatusCode::OK, &json!("toy-model")));
        let (s, caps) = call(&app, "GET", "/v1/capabilities", None, None).await;
        assert_eq!(s, StatusCode::OK);
        let c = &caps["data"][0];
        assert_eq!(
            (&c["model"], &c["limits"]["frame_multiple"], &c["limits"]["tasks"][0]),
            (&json!("toy-model"), &json!(4), &json!("t2v"))
        );
        assert!(c["samplers"].as_array().unwrap().contains(&json!("unipc")), "{caps}");
        // The flat wire form: the frame and size rules beside the other limits.
        for key in ["max_frames", "spatial_multiple", "max_side"] {
            assert!(c["limits"][key].is_u64(), "{key}: {caps}");
        }
        assert!(c["frames_rule"].is_string(), "{caps}");
        let (s, v) = call(&app, "GET", "/version", None, None).await;
        assert_eq!((s, &v["name"]), (StatusCode::OK, &json!("fastvideo")));
        assert!(v["version"].as_str().is_some_and(|v| !v.is_empty()));
        let (s, e) = call(&app, "GET", "/v1/nothing-here", None, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(e["error"]["message"].as_str().unwrap().contains("route"), "{e}");
        let (s, e) = call(&app, "GET", "/v1/videos/video_nope", None, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    });
}

#[test]
fn keys_guard_every_route_but_health_and_ready() {
    rt().block_on(async {
        let app = app(&["sk-router-test-1"]);
        assert_eq!(call(&app, "GET", "/health", None, None).await.0, StatusCode::OK);
        assert_eq!(call(&app, "GET", "/ready", None, None).await.0, StatusCode::OK);
        let (s, e) = call(&app, "GET", "/v1/models", None, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert!(e["error"]["message"].is_string(), "{e}");
        assert_eq!(call(&app, "GET", "/v1/models", Some("sk-wrong-key-0"), None).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(call(&app, "GET", "/metrics", None, None).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(call(&app, "GET", "/v1/models", Some("sk-router-test-1"), None).await.0, StatusCode::OK);
    });
}

#[test]
fn bad_fields_are_400s_naming_the_field_and_a_job_runs_its_course() {
    rt().block_on(async {
        let app = app(&[]);
        let (s, e) = call(&app, "POST", "/v1/videos", None, Some(json!({"prompt": "x", "colour": "red"}))).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("colour"), "{e}");
        let (s, e) = call(&app, "POST", "/v1/videos", None, Some(json!({"prompt": "x", "size": "big"}))).await;
        assert_eq!((s, &e["error"]["param"]), (StatusCode::BAD_REQUEST, &json!("size")), "{e}");
        let (s, e) = call(&app, "POST", "/v1/videos", None, Some(json!({"prompt": "x", "model": "other"}))).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("toy-model"), "{e}");

        let body = json!({"prompt": "a toy", "num_inference_steps": 3, "seed": 5});
        let (s, job) = call(&app, "POST", "/v1/videos", None, Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        let (_, list) = call(&app, "GET", "/v1/videos", None, None).await;
        assert!(list["data"].as_array().unwrap().iter().any(|v| v["id"] == id.as_str()), "{list}");
        // The toy makes no video: the job ends failed, with the reason, and nothing else broke.
        let mut last = Value::Null;
        for _ in 0..200 {
            last = call(&app, "GET", &format!("/v1/videos/{id}"), None, None).await.1;
            if last["status"] == "failed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(last["status"], "failed", "{last}");
        assert!(last["error"]["message"].as_str().unwrap().contains("no video"), "{last}");
        let (s, _) = call(&app, "GET", &format!("/v1/videos/{id}/content"), None, None).await;
        assert!(s.is_client_error(), "{s}");
        assert_eq!(call(&app, "GET", "/ready", None, None).await.0, StatusCode::OK);
    });
}

/// `call` with extra request headers, returning the response's headers too.
async fn call_with(
    app: &Router,
    uri: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut req = Request::builder().method("POST").uri(uri).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[test]
fn prefer_wait_answers_with_the_ended_job_or_the_job_so_far() {
    rt().block_on(async {
        let app = app(&[]);
        // Three 20 ms steps: the toy job ends (failed: it makes no video) well within 10 s.
        let (s, h, job) = call_with(
            &app,
            "/v1/videos",
            &[("prefer", "respond-async, wait=10")],
            json!({"prompt": "x", "num_inference_steps": 3}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{job}");
        assert_eq!(h.get("preference-applied").unwrap(), "wait=10");
        assert_eq!(job["status"], "failed", "the answer is the ended job: {job}");
        // 100 steps take 2 s: after a 1 s wait the job comes back as it stands.
        let t0 = std::time::Instant::now();
        let (s, _, job) =
            call_with(&app, "/v1/videos", &[("prefer", "wait=1")], json!({"prompt": "x", "num_inference_steps": 100}))
                .await;
        let waited = t0.elapsed().as_secs_f64();
        assert_eq!(s, StatusCode::OK, "{job}");
        assert!(matches!(job["status"].as_str(), Some("queued" | "in_progress")), "{job}");
        assert!(waited >= 0.9, "the wait is honoured ({waited} s), and the job came back unfinished");
        // No preference: the queued job at once, no Preference-Applied.
        let (_, h, job) = call_with(&app, "/v1/videos", &[], json!({"prompt": "x", "num_inference_steps": 2})).await;
        assert!(h.get("preference-applied").is_none() && job["status"] == "queued", "{job}");
        for bad in ["wait=soon", "wait=-1", "wait=100000", "wait"] {
            let (s, _, e) = call_with(&app, "/v1/videos", &[("prefer", bad)], json!({"prompt": "x"})).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {e}");
            assert_eq!(e["error"]["param"], "Prefer", "{bad}: {e}");
        }
    });
}

#[test]
fn priorities_above_the_keys_bound_are_400s_naming_priority() {
    rt().block_on(async {
        let app = app(&["alpha-key max_priority=5", "beta-key"]);
        let body = |p: i32| Some(json!({"prompt": "a red circle", "num_inference_steps": 1, "priority": p}));
        for (key, p, want) in [
            ("alpha-key", 6, StatusCode::BAD_REQUEST),
            ("beta-key", 1, StatusCode::BAD_REQUEST),
            ("beta-key", -1001, StatusCode::BAD_REQUEST),
            ("alpha-key", 5, StatusCode::OK),
            ("beta-key", -3, StatusCode::OK),
        ] {
            let (status, v) = call(&app, "POST", "/v1/videos", Some(key), body(p)).await;
            assert_eq!(status, want, "{key} priority {p}: {v}");
            if want != StatusCode::OK {
                assert_eq!(v["error"]["param"], "priority", "{v}");
            }
        }
        let (status, v) = call(&app, "POST", "/v1/images/generations", Some("beta-key"), body(2)).await;
        assert_eq!((status, v["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("priority")), "{v}");
    });
}

#[test]
fn a_model_without_frames_states_no_frame_rule() {
    rt().block_on(async {
        let limits = ModelLimits { tasks: vec![TaskType::T2i], video: None, ..ModelLimits::example() };
        let (s, caps) = call(&app_with(&[], limits), "GET", "/v1/capabilities", None, None).await;
        assert_eq!(s, StatusCode::OK);
        let c = &caps["data"][0];
        assert!(c["limits"].get("frame_multiple").is_none() && c["limits"].get("max_frames").is_none(), "{caps}");
        assert!(c.get("frames_rule").is_none(), "{caps}");
        assert_eq!(c["limits"]["spatial_multiple"], json!(16), "{caps}");
    });
}

#[test]
fn a_model_serves_its_knobs_and_checks_them_by_name() {
    rt().block_on(async {
        let mut limits = ModelLimits { tasks: vec![TaskType::T2v, TaskType::T2i], ..ModelLimits::example() };
        limits.defaults.knobs = fastvideo_request::KnobSchema::example();
        let app = app_with(&[], limits);
        let (_, caps) = call(&app, "GET", "/v1/capabilities", None, None).await;
        let knobs = &caps["data"][0]["limits"]["defaults"]["knobs"];
        assert_eq!(knobs["knobs"][0]["name"], "boundary_ratio", "{caps}");
        assert_eq!(knobs["knobs"][1]["default"], json!({"same_as": "guidance_scale"}), "{caps}");
        // Errors name the field as the client sent it (flat), as for every diffusion field.
        let body = json!({"prompt": "x", "boundary_ratio": 1.5});
        let (s, e) = call(&app, "POST", "/v1/videos", None, Some(body)).await;
        assert_eq!((s, &e["error"]["param"]), (StatusCode::BAD_REQUEST, &json!("boundary_ratio")), "{e}");
        let body = json!({"prompt": "x", "num_inference_steps": 4, "boundary_ratio": 0.5, "switch_step": 2});
        let (s, e) = call(&app, "POST", "/v1/videos", None, Some(body)).await;
        assert_eq!((s, &e["error"]["param"]), (StatusCode::BAD_REQUEST, &json!("switch_step")), "{e}");
        // The toy model without knobs: refused naming the field and saying it takes none.
        let body = json!({"prompt": "x", "guidance_scale_2": 3});
        let (s, e) = call(&app_with(&[], ModelLimits::example()), "POST", "/v1/videos", None, Some(body)).await;
        assert_eq!((s, &e["error"]["param"]), (StatusCode::BAD_REQUEST, &json!("guidance_scale_2")), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("own parameters: none"), "{e}");
    });
}
