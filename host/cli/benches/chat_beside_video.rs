//! Chat requests and a long video job on one engine: a chat's latency alone and while a 50-step
//! video runs, and the video's time alone and with chats arriving, under the step scheduler
//! (`shortest_remaining`) and the request-level FIFO baseline. Token steps and denoise steps
//! share one executor, so this is what "a chat must not wait behind a video, nor starve it"
//! measures. Prints figures; asserts nothing.
//!     cargo bench -p fastvideo --bench chat_beside_video
//! Environment: FASTVIDEO_BENCH_LM (a transformers-layout Qwen folder; default the tiny test
//! fixture), FASTVIDEO_BENCH_OMNI (an omni model folder, e.g. tests/fixtures/tiny-cosmos3: its
//! reasoner chats beside its own videos, one copy of the weights; replaces the default model and
//! the LM), FASTVIDEO_BENCH_DEVICE (default cpu), FASTVIDEO_BENCH_CHATS (default 8),
//! FASTVIDEO_BENCH_TOKENS (default 32), FASTVIDEO_BENCH_STEPS (video steps, default 50).
//! Besides whole chats it prints the median gap between a chat's streamed tokens.

use std::path::PathBuf;
use std::time::Instant;

use fastvideo_assembly::{build_engine, ServeConfig};
use fastvideo_engine::{Engine, Policy};
use fastvideo_request::{InputPart, OmniRequest, TaskType, TextRole};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn chat(id: &str, lm: &str, prompt: &str, tokens: u32) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(id, "");
    r.task = TaskType::Text;
    r.inputs = vec![InputPart::Text { text: prompt.into(), role: TextRole::Prompt }];
    r.diffusion.num_inference_steps = Some(1 + tokens);
    r.node_params.insert("ar_decode".into(), serde_json::json!({"max_tokens": tokens}));
    r.model = Some(lm.into());
    r
}

fn video(id: &str, steps: u32) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(id, "a red circle moving left on a white background");
    r.diffusion.num_inference_steps = Some(steps);
    if std::env::var_os("FASTVIDEO_BENCH_OMNI").is_some() {
        // An omni model's defaults are a published size (720p): the tiny folder's bench is small.
        (r.diffusion.height, r.diffusion.width, r.diffusion.num_frames) = (Some(48), Some(64), Some(17));
    }
    r
}

/// Seconds per chat, one after another, and the gaps between each chat's streamed tokens.
async fn chats(engine: &Engine, lm: &str, prompt: &str, n: usize, tokens: u32, tag: &str) -> (Vec<f64>, Vec<f64>) {
    let (mut times, mut gaps) = (Vec::new(), Vec::new());
    for i in 0..n {
        let t = Instant::now();
        let mut h = engine.submit(chat(&format!("{tag}-chat-{i}"), lm, prompt, tokens)).unwrap();
        let mut last: Option<Instant> = None;
        while let Some(ev) = h.events.recv().await {
            if matches!(ev, fastvideo_request::OmniEvent::Token { .. }) {
                let now = Instant::now();
                if let Some(l) = last {
                    gaps.push(now.duration_since(l).as_secs_f64());
                }
                last = Some(now);
            }
        }
        h.wait().await.unwrap();
        times.push(t.elapsed().as_secs_f64());
    }
    (times, gaps)
}

fn main() -> anyhow::Result<()> {
    let lm = std::env::var("FASTVIDEO_BENCH_LM")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3"));
    let (n, tokens, steps) = (
        env_or("FASTVIDEO_BENCH_CHATS", 8usize),
        env_or("FASTVIDEO_BENCH_TOKENS", 32u32),
        env_or("FASTVIDEO_BENCH_STEPS", 50u32),
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let omni = std::env::var("FASTVIDEO_BENCH_OMNI").ok().map(PathBuf::from);
    println!(
        "| policy | chat alone (p50) | token gap alone (p50) | chat beside the video: first, p50 | token gap beside \
         (p50) | video alone | video with chats |"
    );
    println!("|---|---|---|---|---|---|---|");
    for policy in [Policy::ShortestRemaining, Policy::Fifo] {
        let mut cfg = ServeConfig::default();
        cfg.model.device = std::env::var("FASTVIDEO_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
        match &omni {
            Some(dir) => cfg.model.path = Some(dir.clone()),
            None => cfg.lm.path = Some(lm.clone()),
        }
        cfg.lm.kv_cache = 64 << 20;
        cfg.scheduler.policy = policy;
        let built = build_engine(&cfg)?;
        let (engine, (lm_id, codec)) = (built.engine, built.chat.expect("a language model"));
        let prompt = codec
            .prompt(&serde_json::json!([{"role": "user", "content": "describe a red circle"}]))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let alone = rt.block_on(async {
            // Warm-up: both models' first runs (caches, cost model).
            engine.submit(video("warm", steps)).unwrap().wait().await.unwrap();
            chats(&engine, &lm_id, &prompt, 2, tokens, "warm").await;
            let (mut alone, mut gaps_alone) = chats(&engine, &lm_id, &prompt, n, tokens, "alone").await;
            let t = Instant::now();
            engine.submit(video("solo", steps)).unwrap().wait().await.unwrap();
            let video_alone = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut handle = engine.submit(video("beside", steps)).unwrap();
            // Chats start once the video is denoising.
            while let Some(ev) = handle.events.recv().await {
                if matches!(ev, fastvideo_request::OmniEvent::Progress { .. }) {
                    break;
                }
            }
            let (mut beside, mut gaps_beside) = chats(&engine, &lm_id, &prompt, n, tokens, "beside").await;
            handle.wait().await.unwrap();
            let video_with = t.elapsed().as_secs_f64();
            let first = beside[0];
            let gaps = (median(&mut gaps_alone), median(&mut gaps_beside));
            (median(&mut alone), video_alone, (first, median(&mut beside)), video_with, gaps)
        });
        let (alone, video_alone, beside, video_with, gaps) = (alone.0, alone.1, alone.2, alone.3, alone.4);
        println!(
            "| {policy:?} | {:.0} ms | {:.1} ms | {:.0} ms, {:.0} ms | {:.1} ms | {video_alone:.2} s | {video_with:.2} s \
             ({:.2}x) |",
            alone * 1e3,
            gaps.0 * 1e3,
            beside.0 * 1e3,
            beside.1 * 1e3,
            gaps.1 * 1e3,
            video_with / video_alone
        );
    }
    Ok(())
}
