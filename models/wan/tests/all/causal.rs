//! Self-consistency of the causal transformer (fp32, CPU, the tiny random fixture model): a
//! chunked rollout against a key/value cache must equal one whole-sequence forward with a
//! block-causal mask, with every frame visible and with a rolling window that evicts frames.
//! Tolerance 1e-5 relative (max |a - b| / max |b|): the two differ only in how attention is
//! split (cached keys concatenated vs one masked softmax), a few float32 roundings apart.

use std::path::Path;

use fastvideo_pipeline::kv_pool::{KvPool, KvPoolConfig};
use fastvideo_wan::causal::{pool_config, FrameKv, UnboundedKv, Visibility};
use fastvideo_wan::transformer::{TransformerConfig, WanTransformer3DModel};
use fastvideo_wan::Weights;
use tch::{Device, Kind, Tensor};

const TOL: f64 = 1e-5;

fn model() -> WanTransformer3DModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan/transformer");
    let cfg = TransformerConfig::load(&dir.join("config.json")).unwrap();
    let w = Weights::from_dir(&dir, "diffusion_pytorch_model", Device::Cpu, Kind::Float).unwrap();
    WanTransformer3DModel::new(cfg, &w).unwrap()
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1e-12)
}

fn randn(shape: &[i64], seed: i64) -> Tensor {
    tch::manual_seed(seed);
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

/// Rolls out `frames` latent frames in chunks: for each chunk, a denoise-step forward at `t`
/// (attending to the cache) and the clean pass at t = 0 that commits it. Returns the
/// denoise-step outputs and the commit outputs, concatenated over frames.
fn rollout(
    m: &WanTransformer3DModel,
    clean: &Tensor,
    noisy: &Tensor,
    ctx: &Tensor,
    chunk: i64,
    t: f32,
    kv: &mut dyn FrameKv,
) -> (Tensor, Tensor) {
    let cross = m.cross_kv(ctx);
    let (mut steps, mut commits) = (Vec::new(), Vec::new());
    let frames = clean.size()[2];
    for start in (0..frames).step_by(chunk as usize) {
        let step = m
            .forward_chunk(&noisy.narrow(2, start, chunk), &Tensor::from_slice(&[t]), None, &cross, kv, false)
            .unwrap();
        steps.push(step);
        let c = m
            .forward_chunk(&clean.narrow(2, start, chunk), &Tensor::from_slice(&[0f32]), None, &cross, kv, true)
            .unwrap();
        commits.push(c);
    }
    (Tensor::cat(&steps, 2), Tensor::cat(&commits, 2))
}

/// The reference for chunk `i`'s denoise step: the whole sequence with the earlier chunks
/// clean at t = 0 and chunk `i` noisy at `t` (later chunks cannot influence it).
fn reference_step(
    m: &WanTransformer3DModel,
    clean: &Tensor,
    noisy: &Tensor,
    ctx: &Tensor,
    chunk: i64,
    t: f32,
    vis: Visibility,
) -> Tensor {
    let frames = clean.size()[2];
    let mut outs = Vec::new();
    for start in (0..frames).step_by(chunk as usize) {
        let end = start + chunk;
        let x = Tensor::cat(&[clean.narrow(2, 0, start), noisy.narrow(2, start, chunk)], 2);
        let ts: Vec<f32> = (0..end).map(|j| if j < start { 0.0 } else { t }).collect();
        let out = m
            .forward_block_causal(&x, &Tensor::from_slice(&ts).view([1, end]), None, ctx, chunk as usize, vis)
            .unwrap();
        outs.push(out.narrow(2, start, chunk));
    }
    Tensor::cat(&outs, 2)
}

#[test]
fn chunked_rollout_with_the_cache_equals_the_block_causal_forward() {
    tch::no_grad(|| {
        let m = model();
        let (chunk, frames) = (2, 6);
        let clean = randn(&[1, 4, frames, 4, 6], 1);
        let noisy = randn(&[1, 4, frames, 4, 6], 2);
        let ctx = randn(&[1, 7, 32], 3);
        let mut kv = UnboundedKv::default();
        let (steps, commits) = rollout(&m, &clean, &noisy, &ctx, chunk, 750.0, &mut kv);
        assert_eq!(kv.next_frame(), frames as u64);
        // The clean passes of all chunks are one block-causal forward at t = 0.
        let zeros = Tensor::zeros([1, frames], (Kind::Float, Device::Cpu));
        let full = m.forward_block_causal(&clean, &zeros, None, &ctx, chunk as usize, Visibility::All).unwrap();
        let e = rel_err(&commits, &full);
        assert!(e < TOL, "commit passes vs block-causal forward: {e}");
        let e = rel_err(&steps, &reference_step(&m, &clean, &noisy, &ctx, chunk, 750.0, Visibility::All));
        assert!(e < TOL, "denoise steps vs block-causal forward: {e}");
        // And the mask matters: with every frame visible to every frame the result differs.
        let bidirectional = m.forward(&clean, &Tensor::zeros([1], (Kind::Float, Device::Cpu)), &ctx).unwrap();
        assert!(rel_err(&bidirectional, &full) > 1e-3);
    })
}

#[test]
fn a_rolled_window_equals_recomputing_with_the_windowed_mask() {
    tch::no_grad(|| {
        let m = model();
        let (chunk, frames, window, sink) = (1, 7, 3, 1);
        let clean = randn(&[1, 4, frames, 4, 6], 4);
        let noisy = randn(&[1, 4, frames, 4, 6], 5);
        let ctx = randn(&[1, 7, 32], 6);
        let pool = KvPool::new(KvPoolConfig { budget_bytes: 1 << 20, ..pool_config(&m, 4, 6, Device::Cpu, 0) });
        let mut session = pool.open(window, sink).unwrap();
        let (steps, commits) = rollout(&m, &clean, &noisy, &ctx, chunk, 500.0, &mut session);
        assert_eq!(pool.stats().evictions, (frames as u64) - window as u64);
        let vis = Visibility::Window { window, sink };
        let zeros = Tensor::zeros([1, frames], (Kind::Float, Device::Cpu));
        let full = m.forward_block_causal(&clean, &zeros, None, &ctx, chunk as usize, vis).unwrap();
        let e = rel_err(&commits, &full);
        assert!(e < TOL, "commit passes vs windowed block-causal forward: {e}");
        let e = rel_err(&steps, &reference_step(&m, &clean, &noisy, &ctx, chunk, 500.0, vis));
        assert!(e < TOL, "denoise steps vs windowed block-causal forward: {e}");
        // Eviction is visible in the output: the unwindowed forward differs on the last frames.
        let all = m.forward_block_causal(&clean, &zeros, None, &ctx, chunk as usize, Visibility::All).unwrap();
        assert!(rel_err(&all.narrow(2, 5, 2), &full.narrow(2, 5, 2)) > 1e-4);
        drop(session);
        assert_eq!(pool.stats().used_slabs, 0);
    })
}

/// Parity with the code the world model is trained with (models/training/causal_wan.py: diffusers'
/// transformer with a block-causal mask, per-frame timesteps and an action embedding), fixture
/// from tests/fixtures/make_world_fixture.py. Tolerance 1e-4 relative, as for the other parity
/// tests (the reference builds its rotary tables in float64, ours in float64 then float32).
#[test]
fn block_causal_forward_with_actions_matches_the_training_code() {
    use fastvideo_wan::world::ActionEmbedder;
    tch::no_grad(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let fx: std::collections::HashMap<String, Tensor> =
            Tensor::read_safetensors(dir.join("wan_world.safetensors")).unwrap().into_iter().collect();
        let m = model();
        let emb = ActionEmbedder::load(&dir.join("tiny-world-actions"), Device::Cpu, Kind::Float).unwrap();
        assert_eq!(emb.index("right").unwrap(), 4);
        assert!(emb.index("jump").unwrap_err().to_string().contains("none, up, down, left, right"));
        let cond = emb.embed(&fx["actions"]);
        assert!(rel_err(&cond, &fx["action_embedding"]) < 1e-6);
        let run = |chunk, vis| {
            m.forward_block_causal(&fx["latents"], &fx["frame_timesteps"], Some(&cond), &fx["context"], chunk, vis)
                .unwrap()
        };
        let e = rel_err(&run(2, Visibility::All), &fx["out_all_chunk2"]);
        assert!(e < 1e-4, "chunks of 2, all visible: {e}");
        let e = rel_err(&run(1, Visibility::Window { window: 3, sink: 1 }), &fx["out_window3_sink1_chunk1"]);
        assert!(e < 1e-4, "chunks of 1, window 3, sink 1: {e}");
    })
}
