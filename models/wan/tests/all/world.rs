//! The world-model rollout on the tiny random fixture (CPU, float32): chunk shapes, actions
//! taking effect from the next chunk, the incremental decode equal to decoding the whole
//! sequence, and the session's slabs returned when the rollout is dropped.

use crate::common;

use std::path::Path;

use fastvideo_pipeline::kv_pool::KvPool;
use fastvideo_wan::chunk_rollout::{single_session_pool, ChunkRollout};
use fastvideo_wan::lora_keys::WanKeys;
use fastvideo_wan::vae::DecodeStream;
use fastvideo_wan::world::WorldModel;
use fastvideo_wan::LoadOptions;
use tch::{Device, Kind, Tensor};

fn tiny_world() -> (tempfile::TempDir, WorldModel) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(&fixtures.join("tiny-wan"), dir.path());
    common::copy_dir(&fixtures.join("tiny-world-actions"), &dir.path().join("action_embedder"));
    let spec = serde_json::json!({"chunk_frames": 1, "timesteps": [1000, 500], "shift": 3.0, "window": 3,
        "sink": 1, "fps": 8, "height": 32, "width": 48, "prompt": "a red circle"});
    std::fs::write(dir.path().join("world.json"), spec.to_string()).unwrap();
    let m = WorldModel::load(dir.path(), LoadOptions::new(Device::Cpu)).unwrap();
    (dir, m)
}

#[test]
fn a_rollout_emits_chunks_that_follow_the_action_set_before_them() {
    tch::no_grad(|| {
        let (_dir, m) = tiny_world();
        let pool = single_session_pool(&m, Device::Cpu);
        let mut r = ChunkRollout::new(&m, &pool, "a red circle", 0, Device::Cpu).unwrap();
        let first = r.next_chunk(&m).unwrap();
        assert_eq!(first.frames.size(), [1, 3, 1, 32, 48]);
        let (right, up) = (m.actions.index("right").unwrap(), m.actions.index("up").unwrap());
        r.set_action(right, 7);
        // One denoise step in, a new action restarts the chunk: it is generated under `up`.
        assert!(r.step(&m).unwrap().is_none());
        r.set_action(up, 8);
        assert!(r.at_chunk_start());
        let c1 = r.next_chunk(&m).unwrap();
        assert_eq!((c1.index, c1.action, c1.action_id), (1, up, 8));
        assert_eq!(c1.frames.size(), [1, 3, 4, 32, 48]);
        // The same action again does not restart anything.
        assert!(r.step(&m).unwrap().is_none());
        r.set_action(up, 9);
        assert!(!r.at_chunk_start());
        let c2 = r.next_chunk(&m).unwrap();
        assert_eq!((c2.action, c2.action_id), (up, 8));
        let c3 = r.next_chunk(&m).unwrap();
        assert_eq!(c3.action_id, 9);
        for _ in 0..2 {
            r.next_chunk(&m).unwrap();
        }
        let stats = pool.stats();
        assert_eq!((stats.sessions, stats.evictions), (1, 6 - 3));
        drop(r);
        assert_eq!(pool.stats().used_slabs, 0);
    })
}

#[test]
fn the_incremental_decode_equals_decoding_the_whole_sequence() {
    tch::no_grad(|| {
        let (_dir, m) = tiny_world();
        tch::manual_seed(3);
        let z = Tensor::randn([1, 4, 4, 4, 6], (Kind::Float, Device::Cpu));
        let whole = m.wan.vae.decode(&z).unwrap();
        let mut stream = DecodeStream::default();
        let parts: Vec<Tensor> =
            (0..4).map(|i| m.wan.vae.decode_next(&mut stream, &z.narrow(2, i, 1)).unwrap()).collect();
        assert_eq!(parts[0].size()[2], 1);
        assert_eq!(parts[1].size()[2], 4);
        let streamed = Tensor::cat(&parts, 2);
        let diff = (&streamed - &whole).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "streamed vs whole decode: {diff}");
    })
}

#[test]
fn a_full_pool_refuses_a_session_with_the_sizes() {
    let (_dir, m) = tiny_world();
    let pool = single_session_pool(&m, Device::Cpu);
    let _held = ChunkRollout::new(&m, &pool, "a", 0, Device::Cpu).unwrap();
    let err = ChunkRollout::new(&m, &pool, "a", 1, Device::Cpu).err().unwrap().to_string();
    assert!(err.contains("window of 3 frames needs"), "{err}");
    assert_eq!(KvPool::stats(&pool).sessions, 1);
}

/// A session as the engine runs it: a `task: world` request through the session pipeline, its
/// actions through the inbox, its chunks as events, its end when the inbox closes.
fn session_run(
    sessions: &fastvideo_wan::sessions::WorldSessions,
    id: &str,
) -> (fastvideo_pipeline::PipelineRun, fastvideo_pipeline::session::ActionInbox) {
    use fastvideo_pipeline::session::{ActionInbox, SessionModel, SessionRequest, ACTIONS};
    use fastvideo_pipeline::{CancelToken, PipelineRun, Value, Values};
    let request = sessions.request(id, &SessionRequest::default()).unwrap();
    assert_eq!(request.task, fastvideo_request::TaskType::World);
    let inbox = ActionInbox::default();
    let mut values = Values::default();
    values.insert(ACTIONS, Value::Inbox(inbox.clone()));
    (PipelineRun::new(sessions.pipeline(), request, Device::Cpu, values, CancelToken::default()), inbox)
}

/// `(first_frame, action_id)` of each chunk a run emitted.
fn chunks(events: &[fastvideo_request::OmniEvent]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            fastvideo_request::OmniEvent::Chunk { first_frame, action_id, .. } => Some((*first_frame, *action_id)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_action_from_a_later_frame_waits_for_the_chunk_that_starts_there() {
    use fastvideo_request::ActionPart;
    use fastvideo_wan::sessions::WorldSessions;
    let (_dir, m) = tiny_world();
    let sessions = WorldSessions::plain("tiny".into(), std::sync::Arc::new(m), 1, Device::Cpu).unwrap();
    let (mut run, inbox) = session_run(&sessions, "s");
    // Chunks start at frames 0 (one frame), 1, 5, 9, ...: from frame 7 means the chunk at 9.
    inbox.push(ActionPart { from_frame: Some(7), ..ActionPart::key("left", 4) });
    let mut events = Vec::new();
    while chunks(&events).len() < 4 {
        run.advance(&mut |e| events.push(e)).unwrap();
    }
    assert_eq!(chunks(&events), [(0, 0), (1, 0), (5, 0), (9, 4)]);
    // Closing the inbox ends the loop: the run finishes, its slabs return with it.
    inbox.close();
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    assert!(out.artifacts.is_empty(), "a session returns its frames as events only");
    assert_eq!(sessions.pool().stats().used_slabs, 0);
}

#[test]
fn a_session_run_makes_the_frames_of_the_rollout_it_drives() {
    // The session pipeline (sampler, guidance policy, loop node) adds nothing to the rollout's
    // numbers: its chunks equal a bare rollout's under the same seed, bit for bit.
    use fastvideo_wan::sessions::WorldSessions;
    let (_dir, m) = tiny_world();
    let m = std::sync::Arc::new(m);
    let bare: Vec<Tensor> = tch::no_grad(|| {
        let pool = single_session_pool(&m, Device::Cpu);
        let mut r = ChunkRollout::new(&m, &pool, "a red circle", 0, Device::Cpu).unwrap();
        (0..3).map(|_| r.next_chunk(&m).unwrap().frames).collect()
    });
    let sessions = WorldSessions::plain("tiny".into(), m.clone(), 1, Device::Cpu).unwrap();
    let (mut run, _inbox) = session_run(&sessions, "s");
    let mut videos = Vec::new();
    while videos.len() < 3 {
        run.advance(&mut |e| {
            if let fastvideo_request::OmniEvent::Chunk { video, .. } = e {
                videos.push(video)
            }
        })
        .unwrap();
    }
    for (i, (v, f)) in videos.iter().zip(&bare).enumerate() {
        let want = fastvideo_pipeline::frames_to_video(f, v.fps).unwrap();
        assert_eq!(v.rgb, want.rgb, "chunk {i}");
    }
}

/// A step interceptor with per-request state: it numbers the steps it sees (reported as events)
/// and supplies the output of every chunk's second denoise step (velocity 0), so that step
/// runs no forward.
struct NumberedSteps;
struct Numbered(u32, Vec<fastvideo_request::OmniEvent>);

impl fastvideo_pipeline::StepPolicy for NumberedSteps {
    fn init(
        &self,
        _: &fastvideo_request::ResolvedRequest,
        _: &fastvideo_pipeline::PluginMeter,
    ) -> anyhow::Result<Box<dyn fastvideo_pipeline::StepPolicyState>> {
        Ok(Box::new(Numbered(0, Vec::new())))
    }
}

impl fastvideo_pipeline::StepPolicyState for Numbered {
    fn before_step(&mut self, step: &fastvideo_pipeline::StepCtx, latents: &Tensor) -> anyhow::Result<Option<Tensor>> {
        self.0 += 1;
        assert_eq!(step.num_steps, 2, "the world's few-step schedule");
        Ok((step.step_index == 1).then(|| latents.zeros_like()))
    }
    fn after_step(&mut self, step: &fastvideo_pipeline::StepCtx, _: &Tensor) -> anyhow::Result<()> {
        self.1.push(fastvideo_request::OmniEvent::Plugin {
            request_id: step.request.request_id.clone(),
            plugin: "numbered".into(),
            name: "step".into(),
            payload: self.0.into(),
        });
        Ok(())
    }
    fn take_events(&mut self) -> Vec<fastvideo_request::OmniEvent> {
        std::mem::take(&mut self.1)
    }
}

#[test]
fn a_step_interceptor_runs_in_each_session_with_its_own_state() {
    use fastvideo_pipeline::{ClassicCfg, LoopPolicies};
    use fastvideo_request::OmniEvent;
    use fastvideo_wan::sessions::WorldSessions;
    let (_dir, m) = tiny_world();
    let mut policies = LoopPolicies::new(std::sync::Arc::new(ClassicCfg));
    policies.steps = Some(std::sync::Arc::new(NumberedSteps));
    let sessions = WorldSessions::new("tiny".into(), std::sync::Arc::new(m), 2, Device::Cpu, policies, None).unwrap();
    let (mut a, _ia) = session_run(&sessions, "a");
    let (mut b, _ib) = session_run(&sessions, "b");
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    // Interleaved unit by unit, as the engine runs two sessions.
    while chunks(&ea).len() < 3 || chunks(&eb).len() < 3 {
        a.advance(&mut |e| ea.push(e)).unwrap();
        b.advance(&mut |e| eb.push(e)).unwrap();
    }
    for (name, events, run) in [("a", &ea, &a), ("b", &eb, &b)] {
        let numbers: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                OmniEvent::Plugin { request_id, payload, .. } => {
                    assert_eq!(request_id, name);
                    payload.as_u64()
                }
                _ => None,
            })
            .collect();
        // Its own count, 1, 2, 3, … whatever the other session did in between.
        assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>(), "session {name}");
        // Chunk 0 is generated (2 denoise steps); each later chunk too: the interceptor saw
        // every denoise step and supplied every second one, which ran no forward.
        let steps = numbers.len() as u32;
        let commits = chunks(events).len() as u32;
        assert!(steps >= 2 * commits, "session {name}: {steps} steps for {commits} chunks");
        assert_eq!(run.metrics().forwards, steps / 2 + steps % 2 + commits, "session {name}");
    }
}

#[test]
fn a_rollout_runs_with_lora_adapters_on_every_chunk() {
    // tiny-wan's transformer, so the tiny fixture adapters fit the tiny world model.
    use fastvideo_pipeline::AdapterSet;
    use std::sync::Arc;
    tch::no_grad(|| {
        let (_dir, m) = tiny_world();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let file = fastvideo_lora::LoraFile::read(&fixtures.join("lora/original.safetensors"), &WanKeys).unwrap();
        let adapter = Arc::new(m.wan.transformer.prepare_adapter(&file, "original", "h").unwrap());
        let actions = vec!["right".to_string(), "up".to_string()];
        let run = |set: Option<Arc<AdapterSet>>| {
            fastvideo_wan::chunk_rollout::run_offline(&m, &actions, "a red circle", None, 3, Device::Cpu, set, |_| {})
                .unwrap()
        };
        let plain = run(None);
        let zero = run(Some(Arc::new(AdapterSet::new(vec![(Arc::clone(&adapter), 0.0)]))));
        assert!(zero.equal(&plain), "strength 0 is no adapter, bit for bit");
        let adapted = run(Some(Arc::new(AdapterSet::new(vec![(adapter, 1.0)]))));
        assert_eq!(adapted.size(), plain.size());
        let moved = (&adapted - &plain).abs().max().double_value(&[]);
        assert!(moved > 1e-3, "the adapter changes every chunk's frames ({moved})");
    })
}

#[test]
fn the_offline_rollout_runs_the_session_pipeline_and_equals_the_bare_rollout() {
    // `fastvideo world`, `eval --world` and the warm-up roll out through the session pipeline
    // (the loop contract); its video is the bare rollout's, byte for byte, with and without a
    // given first frame, and each action lands on the chunk it was meant for.
    use std::sync::Arc;
    tch::no_grad(|| {
        let (_dir, m) = tiny_world();
        let m = Arc::new(m);
        let actions = vec!["right".to_string(), "up".to_string(), "left".to_string()];
        let first = Tensor::rand([1, 3, 1, 32, 48], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
        for frame in [None, Some(&first)] {
            let bare = fastvideo_wan::chunk_rollout::run_offline(
                &m,
                &actions,
                "a red circle",
                frame,
                5,
                Device::Cpu,
                None,
                |_| {},
            )
            .unwrap();
            let bare = fastvideo_pipeline::frames_to_video(&bare, m.spec.fps).unwrap();
            let mut chunk_frames = Vec::new();
            let video = fastvideo_wan::offline_rollout::rollout(
                &m,
                &actions,
                "a red circle",
                frame,
                5,
                Device::Cpu,
                None,
                |c| chunk_frames.push(c.num_frames),
            )
            .unwrap();
            assert_eq!((video.num_frames, video.width, video.height), (bare.num_frames, bare.width, bare.height));
            assert!(video.rgb == bare.rgb, "first frame given: {}", frame.is_some());
            assert_eq!(chunk_frames, [1, 4, 4, 4], "one chunk for the first frame, then one per action");
        }
        let e =
            fastvideo_wan::offline_rollout::rollout(&m, &["jump".to_string()], "x", None, 0, Device::Cpu, None, |_| {});
        assert!(e.unwrap_err().to_string().contains("jump"), "an unknown action is named");
    })
}

/// PSNR in dB of `a` against `b`, both in [-1, 1].
fn psnr(a: &Tensor, b: &Tensor) -> f64 {
    let mse = (a - b).square().mean(Kind::Float).double_value(&[]);
    10.0 * (4.0 / mse.max(1e-12)).log10()
}

#[test]
fn the_shipped_tiny_decoder_gives_a_session_nearly_the_vaes_frames() {
    tch::no_grad(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../world");
        let run = |m: &WorldModel| {
            let pool = single_session_pool(m, Device::Cpu);
            let mut r = ChunkRollout::new(m, &pool, &m.spec.prompt, 5, Device::Cpu).unwrap();
            let right = m.actions.index("right").unwrap();
            let mut frames = Vec::new();
            for i in 0..4 {
                if i == 1 {
                    r.set_action(right, 1);
                }
                frames.push(r.next_chunk(m).unwrap().frames);
            }
            Tensor::cat(&frames, 2)
        };
        let vae = run(&WorldModel::load(&dir, LoadOptions::new(Device::Cpu)).unwrap());
        let tiny_model = WorldModel::load(&dir, LoadOptions::new(Device::Cpu)).unwrap().with_tiny_decoder().unwrap();
        let tiny = run(&tiny_model);
        assert_eq!(tiny.size(), vae.size(), "the same frames, one for one");
        let p = psnr(&tiny, &vae);
        eprintln!("tiny decoder vs the VAE over a 4-chunk session: {p:.1} dB");
        // Training measured 25.5 dB on held-out clips (models/world/tiny_vae/train_state.json).
        // Bound: 20 dB; identical frames (inf) would mean the tiny decoder was not used.
        assert!(p > 20.0 && p.is_finite(), "PSNR {p}");
    })
}

#[test]
fn a_world_folder_without_a_tiny_decoder_says_so() {
    let (_dir, m) = tiny_world();
    let err = m.with_tiny_decoder().err().expect("no tiny_vae/ in the fixture").to_string();
    assert!(err.contains("tiny_vae/"), "{err}");
}
