//! The decode loop (`fastvideo_pipeline::token::ARDecodeLoop`) driven step by step over the tiny
//! Qwen3 fixture, as the engine's driver would: the tokens it streams and stores, greedy against
//! transformers' `generate`, seeded sampling, stop tokens, and bad parameters named.

use std::path::Path;
use std::sync::Arc;

use fastvideo_pipeline::token::ARDecodeLoop;
use fastvideo_pipeline::{LoopStage, NodeCtx, PluginMeter, Value, Values};
use fastvideo_qwen::QwenForCausalLM;
use fastvideo_request::{ModelLimits, OmniEvent, OmniRequest, ResolvedRequest};
use tch::{Device, Kind, Tensor};

const NODE: &str = "ar_decode";

fn fixture() -> (Arc<QwenForCausalLM>, Vec<i64>, Vec<i64>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3");
    let model = QwenForCausalLM::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let t = Tensor::read_safetensors(dir.join("expected.safetensors")).unwrap();
    let get = |n: &str| t.iter().find(|(k, _)| k == n).map(|(_, v)| v.shallow_clone()).unwrap();
    let prompt = Vec::<i64>::try_from(get("prompt").get(0)).unwrap();
    (Arc::new(model), prompt, Vec::try_from(get("greedy")).unwrap())
}

fn request(params: serde_json::Value) -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video("chat-1", "unused");
    r.node_params.insert(NODE.into(), params);
    r.resolve(&ModelLimits::example(), || 1).unwrap()
}

/// Runs the loop to the end: the stored tokens, the streamed ones, and the steps taken.
fn run(
    model: &Arc<QwenForCausalLM>,
    prompt: &[i64],
    params: serde_json::Value,
) -> anyhow::Result<(Vec<i64>, Vec<i64>, u32)> {
    let stage = ARDecodeLoop::new(model.clone(), "prompt_tokens", "tokens", 4);
    let req = request(params);
    let meter = PluginMeter::default();
    let ctx = NodeCtx { request: &req, node: NODE, device: Device::Cpu, meter: &meter };
    let mut values = Values::default();
    values.insert("prompt_tokens", Value::Tensor(Tensor::from_slice(prompt)));
    let mut state = stage.init(&ctx, &mut values)?;
    let mut streamed = Vec::new();
    while state.step < state.total_steps {
        let r = stage.step(&ctx, &mut state)?;
        for e in r.emit {
            if let OmniEvent::Token { index, token, node, .. } = e {
                assert_eq!((index as usize, node.as_str()), (streamed.len(), NODE));
                streamed.push(token);
            }
        }
        state.step += 1;
        if r.done {
            break;
        }
    }
    let steps = state.step;
    stage.finalize(&ctx, state, &mut values)?;
    let stored = Vec::try_from(values.tensor("tokens")?.shallow_clone())?;
    Ok((stored, streamed, steps))
}

#[test]
fn greedy_decoding_streams_transformers_tokens_one_per_step() {
    let (model, prompt, greedy) = fixture();
    let (stored, streamed, steps) = run(&model, &prompt, serde_json::json!({"max_tokens": 64})).unwrap();
    assert_eq!(stored, greedy, "the loop's greedy tokens equal transformers' generate");
    assert_eq!(streamed, greedy, "every token is streamed once, in order");
    // 11 prompt tokens in chunks of 4: two steps read prompt only, the third yields a token.
    assert_eq!(steps, 2 + 64);
}

#[test]
fn sampling_is_reproducible_per_seed_and_stop_tokens_end_it() {
    let (model, prompt, greedy) = fixture();
    let p = |seed: u64| serde_json::json!({"max_tokens": 24, "temperature": 1.5, "top_k": 40, "seed": seed});
    let a = run(&model, &prompt, p(3)).unwrap().0;
    assert_eq!(a, run(&model, &prompt, p(3)).unwrap().0);
    assert_ne!(a, run(&model, &prompt, p(4)).unwrap().0);
    assert_eq!(a.len(), 24);
    // A stop token ends the output before it, wherever it first comes.
    let stop = greedy[9];
    let first = greedy.iter().position(|&t| t == stop).unwrap();
    let (stored, streamed, _) =
        run(&model, &prompt, serde_json::json!({"max_tokens": 64, "stop_token_ids": [stop]})).unwrap();
    assert_eq!(stored, greedy[..first].to_vec());
    assert_eq!(streamed, stored);
}

#[test]
fn bad_parameters_and_prompts_are_named() {
    let (model, prompt, _) = fixture();
    for (params, field) in [
        (serde_json::json!({"max_tokens": 0}), "max_tokens"),
        (serde_json::json!({"temperature": -1.0}), "temperature"),
        (serde_json::json!({"top_p": 0.0}), "top_p"),
        (serde_json::json!({"top_p": 2.0}), "top_p"),
        (serde_json::json!({"max_token": 3}), "max_token"),
    ] {
        let e = format!("{:#}", run(&model, &prompt, params).unwrap_err());
        assert!(e.contains(field), "{field}: {e}");
    }
    let long = vec![1i64; 600];
    let e = format!("{:#}", run(&model, &long, serde_json::json!({})).unwrap_err());
    assert!(e.contains("600 tokens") && e.contains("512"), "{e}");
}

/// Runs several generations a step at a time, interleaved as the scheduler would, each on its
/// own paged cache from one pool.
#[test]
fn paged_generations_interleaved_equal_their_solo_contiguous_runs_and_free_their_blocks() {
    use fastvideo_pipeline::token::{CausalLm, DecodeParams, Generation, KvBlockPool, PagedKv};
    let (model, prompt, greedy) = fixture();
    let pool = Arc::new(KvBlockPool::new(model.kv_shape(), 16, 64, Device::Cpu, Kind::Float));
    let lengths = [64u32, 7, 30];
    let prompts = [prompt.clone(), prompt[..5].to_vec(), prompt[3..].to_vec()];
    let solo: Vec<Vec<i64>> = prompts
        .iter()
        .zip(lengths)
        .map(|(p, n)| {
            let params = DecodeParams { max_tokens: n, ..Default::default() };
            let mut g = Generation::new(model.as_ref(), p.clone(), &params, &[]).unwrap();
            while g.finish().is_none() {
                g.step(model.as_ref(), Device::Cpu, 4).unwrap();
            }
            g.tokens().to_vec()
        })
        .collect();
    assert_eq!(solo[0], greedy);
    let mut running: Vec<Generation> = prompts
        .iter()
        .zip(lengths)
        .map(|(p, n)| {
            let params = DecodeParams { max_tokens: n, ..Default::default() };
            let cache = Box::new(PagedKv::new(pool.clone()));
            Generation::with_cache(model.as_ref() as &dyn CausalLm, cache, p.clone(), &params, &[]).unwrap()
        })
        .collect();
    while running.iter().any(|g| g.finish().is_none()) {
        for g in running.iter_mut().filter(|g| g.finish().is_none()) {
            g.step(model.as_ref(), Device::Cpu, 4).unwrap();
        }
    }
    for (g, want) in running.iter().zip(&solo) {
        assert_eq!(g.tokens(), want.as_slice(), "paged and interleaved equals contiguous and alone");
    }
    assert!(pool.free_blocks() < pool.blocks());
    drop(running);
    assert_eq!(pool.free_blocks(), pool.blocks(), "every block returns");

    // A pool too small for the prompt: a clear error, nothing kept.
    let tiny = Arc::new(KvBlockPool::new(model.kv_shape(), 4, 2, Device::Cpu, Kind::Float));
    let params = DecodeParams { max_tokens: 4, ..Default::default() };
    let mut g =
        Generation::with_cache(model.as_ref(), Box::new(PagedKv::new(tiny.clone())), prompt, &params, &[]).unwrap();
    let e = g.step(model.as_ref(), Device::Cpu, 64).unwrap_err().to_string();
    assert!(e.contains("exhausted"), "{e}");
    drop(g);
    assert_eq!(tiny.free_blocks(), 2);
}

/// What the scheduler does with several chat requests: prefill steps alone, then every request
/// at a decode step in one batched forward (`batch_key` equal, `step_batch`), requests joining
/// and finishing at different steps.
#[test]
fn batched_decode_steps_give_each_request_its_solo_tokens() {
    let (model, _, _) = fixture();
    // Contiguous caches (attention row by row), then one paged pool (one attention per layer
    // over every row's pages).
    batched_run(ARDecodeLoop::new(model.clone(), "prompt_tokens", "tokens", 4));
    let pool = Arc::new(fastvideo_pipeline::token::KvBlockPool::new(model.kv_shape(), 8, 64, Device::Cpu, Kind::Float));
    batched_run(ARDecodeLoop::new(model.clone(), "prompt_tokens", "tokens", 4).with_pool(pool.clone()));
    assert_eq!(pool.free_blocks(), pool.blocks(), "every block returns");
}

fn batched_run(stage: ARDecodeLoop) {
    use fastvideo_pipeline::LoopState;
    let (model, prompt, greedy) = fixture();
    let prompts = [prompt.clone(), prompt[..5].to_vec(), prompt[2..].to_vec(), prompt[..9].to_vec()];
    let lengths = [64u32, 9, 20, 33];
    let reqs: Vec<ResolvedRequest> = lengths.iter().map(|n| request(serde_json::json!({"max_tokens": n}))).collect();
    let meter = PluginMeter::default();
    let ctxs: Vec<NodeCtx> =
        reqs.iter().map(|r| NodeCtx { request: r, node: NODE, device: Device::Cpu, meter: &meter }).collect();
    let mut states: Vec<LoopState> = prompts
        .iter()
        .zip(&ctxs)
        .map(|(p, ctx)| {
            let mut values = Values::default();
            values.insert("prompt_tokens", Value::Tensor(Tensor::from_slice(p)));
            stage.init(ctx, &mut values).unwrap()
        })
        .collect();
    let mut done = [false; 4];
    let mut streamed = vec![Vec::new(); 4];
    let mut batched_calls = 0;
    // The third request joins late: it starts after the others' first 10 rounds.
    for round in 0.. {
        let live: Vec<usize> = (0..4).filter(|&i| !done[i] && (i != 2 || round >= 10)).collect();
        if live.is_empty() && done.iter().all(|&d| d) {
            break;
        }
        let (batch, alone): (Vec<usize>, Vec<usize>) =
            live.into_iter().partition(|&i| stage.batch_key(&ctxs[i], &states[i]).is_some());
        let mut results = Vec::new();
        if batch.len() > 1 {
            batched_calls += 1;
            let keys: Vec<_> = batch.iter().map(|&i| stage.batch_key(&ctxs[i], &states[i])).collect();
            assert!(keys.windows(2).all(|w| w[0] == w[1]), "one model, one key");
            let bctx: Vec<NodeCtx> = batch.iter().map(|&i| NodeCtx { ..ctxs[i] }).collect();
            let mut picked: Vec<&mut LoopState> = Vec::new();
            for (i, s) in states.iter_mut().enumerate() {
                if batch.contains(&i) {
                    picked.push(s);
                }
            }
            for (i, r) in batch.iter().zip(stage.step_batch(&bctx, &mut picked)) {
                results.push((*i, r.unwrap()));
            }
        } else {
            for &i in &batch {
                results.push((i, stage.step(&ctxs[i], &mut states[i]).unwrap()));
            }
        }
        for &i in &alone {
            results.push((i, stage.step(&ctxs[i], &mut states[i]).unwrap()));
        }
        for (i, r) in results {
            for e in r.emit {
                if let OmniEvent::Token { token, .. } = e {
                    streamed[i].push(token);
                }
            }
            states[i].step += 1;
            done[i] |= r.done;
        }
    }
    drop(states);
    assert!(batched_calls > 20, "most decode steps ran batched ({batched_calls})");
    for (i, (p, n)) in prompts.iter().zip(lengths).enumerate() {
        let solo = run(&model, p, serde_json::json!({"max_tokens": n})).unwrap().0;
        assert_eq!(streamed[i], solo, "request {i}: batched equals solo");
    }
    assert_eq!(streamed[0], greedy);
}
