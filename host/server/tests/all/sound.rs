//! Sound through the server, end to end over a toy pipeline that makes a clip and its sound (as
//! a family with an audio decoder would): the job reports its `fps` and `audio_sample_rate`,
//! its MP4 carries the AAC track, `generate_sound: false` leaves it out, and a model without
//! sound refuses `generate_sound` with a 400 naming it.

use std::sync::Arc;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use fastvideo_pipeline::{LoopStage, LoopState, NodeCtx, StepResult, Value, Values};
use fastvideo_request::{AudioArtifact, AudioLimits, ModelLimits, TaskType, VideoArtifact};
use fastvideo_server::{router, ApiKeys};
use serde_json::{json, Value as Json};
use tower::ServiceExt;

use crate::common::toy_state;

/// Makes a grey clip of the request's shape and a 440 Hz stereo tone a quarter second longer
/// than it (Cosmos3's waveform, too, runs past the last frame), as a family's decoders would.
struct Loud;

impl LoopStage for Loud {
    fn init(&self, ctx: &NodeCtx, _: &mut Values) -> Result<LoopState> {
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(()) })
    }
    fn step(&self, _: &NodeCtx, _: &mut LoopState) -> Result<StepResult> {
        Ok(StepResult { forwards: 1, ..Default::default() })
    }
    fn finalize(&self, ctx: &NodeCtx, _: LoopState, values: &mut Values) -> Result<()> {
        let r = &ctx.request;
        let rgb = vec![128; (r.num_frames * r.height * r.width * 3) as usize];
        let video = VideoArtifact { fps: r.fps, num_frames: r.num_frames, height: r.height, width: r.width, rgb };
        values.insert("video", Value::Video(video));
        if r.generate_sound {
            let n = ((r.num_frames as f64 / r.fps as f64 + 0.25) * 48_000.0) as usize;
            let tone = |i: usize| (0.5 * (std::f64::consts::TAU * 440.0 * i as f64 / 48_000.0).sin()) as f32;
            let samples = (0..n).flat_map(|i| [tone(i), tone(i)]).collect();
            values.insert(
                fastvideo_pipeline::AUDIO,
                Value::Audio(AudioArtifact { sample_rate: 48_000, channels: 2, samples }),
            );
        }
        Ok(())
    }
}

fn app(audio: Option<AudioLimits>) -> Router {
    let limits = ModelLimits { tasks: vec![TaskType::T2v], audio, ..ModelLimits::example() };
    let state = toy_state(limits, Arc::new(Loud), &["video", fastvideo_pipeline::AUDIO]);
    router(state.with_api_keys(ApiKeys::new(&[], false).unwrap()))
}

async fn call(app: &Router, method: &str, uri: &str, body: Option<Json>) -> (StatusCode, Vec<u8>) {
    let req = Request::builder().method(method).uri(uri);
    let req = match body {
        Some(b) => req.header("content-type", "application/json").body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    (status, axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap().to_vec())
}

async fn json_call(app: &Router, method: &str, uri: &str, body: Option<Json>) -> (StatusCode, Json) {
    let (s, bytes) = call(app, method, uri, body).await;
    (s, serde_json::from_slice(&bytes).unwrap_or(Json::Null))
}

/// Runs a job to completion; its final video object and its MP4.
async fn run_job(app: &Router, body: Json) -> (Json, Vec<u8>) {
    let (s, job) = json_call(app, "POST", "/v1/videos", Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let mut last = Json::Null;
    for _ in 0..500 {
        last = json_call(app, "GET", &format!("/v1/videos/{id}"), None).await.1;
        if last["status"] == "completed" || last["status"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(last["status"], "completed", "{last}");
    let (s, mp4) = call(app, "GET", &format!("/v1/videos/{id}/content"), None).await;
    assert_eq!(s, StatusCode::OK);
    (last, mp4)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_job_with_sound_reports_it_and_its_mp4_carries_it() {
    rt().block_on(async {
        let app = app(Some(AudioLimits { sample_rate: 48_000, channels: 2 }));
        let (s, caps) = json_call(&app, "GET", "/v1/capabilities", None).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(caps["data"][0]["limits"]["audio"], json!({"sample_rate": 48000, "channels": 2}), "{caps}");

        // Sound by default on a model that makes it: 17 frames at 8 fps, 2.125 s.
        let (job, mp4) = run_job(&app, json!({"prompt": "a bell", "num_inference_steps": 2})).await;
        assert_eq!((job["fps"].clone(), job["audio_sample_rate"].clone()), (json!(8), json!(48000)), "{job}");
        let r = mp4::Mp4Reader::read_header(std::io::Cursor::new(&mp4), mp4.len() as u64).unwrap();
        assert_eq!(r.tracks().len(), 2, "video and sound");
        let t = &r.tracks()[&2];
        assert_eq!(t.media_type().unwrap(), mp4::MediaType::AAC);
        assert_eq!(t.sample_freq_index().unwrap(), mp4::SampleFreqIndex::Freq48000);
        assert_eq!(t.channel_config().unwrap(), mp4::ChannelConfig::Stereo);
        // The track plays for the video's 2.125 s (its edit), not the 2.375 s the toy made.
        let edit = &t.trak.edts.as_ref().expect("an edit list").elst.as_ref().expect("elst").entries[0];
        assert_eq!(edit.segment_duration, 2125, "{edit:?}");
        let aac_frames = t.sample_count() as f64;
        assert!((aac_frames * 1024.0 / 48_000.0 - 2.125).abs() < 3.0 * 1024.0 / 48_000.0, "{aac_frames} AAC frames");

        // Asked not to, the same model makes a silent clip: no audio track at all.
        let (job, mp4) =
            run_job(&app, json!({"prompt": "a bell", "num_inference_steps": 2, "generate_sound": false})).await;
        assert_eq!((job["fps"].clone(), job["audio_sample_rate"].clone()), (json!(8), Json::Null), "{job}");
        let r = mp4::Mp4Reader::read_header(std::io::Cursor::new(&mp4), mp4.len() as u64).unwrap();
        assert_eq!(r.tracks().len(), 1, "a silent clip has no audio track");
    });
}

#[test]
fn generate_sound_on_a_model_without_sound_is_a_400_naming_it() {
    rt().block_on(async {
        let app = app(None);
        let (s, caps) = json_call(&app, "GET", "/v1/capabilities", None).await;
        assert_eq!(s, StatusCode::OK);
        assert!(caps["data"][0]["limits"].get("audio").is_none(), "{caps}");
        let (s, e) = json_call(&app, "POST", "/v1/videos", Some(json!({"prompt": "x", "generate_sound": true}))).await;
        assert_eq!((s, &e["error"]["param"]), (StatusCode::BAD_REQUEST, &json!("generate_sound")), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("makes no sound"), "{e}");
        // Without sound, the job object says so.
        let (job, _) = run_job(&app, json!({"prompt": "x", "num_inference_steps": 1})).await;
        assert_eq!((job["fps"].clone(), job["audio_sample_rate"].clone()), (json!(8), Json::Null), "{job}");
    });
}
