//! `ARDecodeLoop`: autoregressive decoding as a loop node. `init` takes the prompt's token ids
//! (a tensor value) and the request's decode parameters (its per-node parameters), `step` runs
//! one bounded unit — a prefill chunk of at most `prefill_chunk` prompt tokens, or one generated
//! token — and `finalize` stores the generated ids. The step boundary is where the scheduler
//! interleaves other requests' token and denoise steps, cancels, and streams (one `token` event
//! per generated token).

use std::any::Any;
use std::sync::Arc;

use anyhow::{anyhow, bail, ensure, Result};
use fastvideo_request::OmniEvent;
use serde::Deserialize;
use tch::{Kind, Tensor};

use super::sampling::{Sampler, SamplingParams};
use crate::{LoopStage, LoopState, NodeCtx, StepResult, Value, Values};

/// A causal language model as the loop drives it.
pub trait CausalLm: Send + Sync {
    /// A fresh per-request key/value cache.
    fn new_cache(&self) -> Box<dyn Any + Send>;
    /// Logits `[1, T, vocab]` for `tokens [1, T]` following the positions in `cache`, which it
    /// extends by `T`.
    fn forward(&self, tokens: &Tensor, cache: &mut (dyn Any + Send)) -> Result<Tensor>;
    /// Positions the model takes (prompt and output together).
    fn max_positions(&self) -> i64;
    /// Tokens that end a generation (the model's EOS ids).
    fn eos_tokens(&self) -> Vec<i64>;
}

/// Why a generation ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS or stop token (not part of the output).
    Stop,
    /// `max_tokens` generated, or the model's context full.
    Length,
}

/// The request's decode parameters, from its per-node parameters (`node_params.<node>`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeParams {
    /// Tokens to generate at most (default 256).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// See [`SamplingParams`]; 0 (the default) is greedy.
    #[serde(default)]
    pub temperature: f64,
    /// See [`SamplingParams`] (default 1).
    #[serde(default = "one")]
    pub top_p: f64,
    /// See [`SamplingParams`] (default 0: off).
    #[serde(default)]
    pub top_k: usize,
    /// See [`SamplingParams`] (default 1: off).
    #[serde(default = "one")]
    pub repetition_penalty: f64,
    /// The sampler's seed (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Token ids that end the generation besides the model's EOS.
    #[serde(default)]
    pub stop_token_ids: Vec<i64>,
}

fn default_max_tokens() -> u32 {
    256
}
fn one() -> f64 {
    1.0
}

impl Default for DecodeParams {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every field has a default")
    }
}

impl DecodeParams {
    /// The sampler's part.
    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
        }
    }
}

/// A request's decoding in progress.
struct Decoding {
    cache: Box<dyn Any + Send>,
    prompt: Vec<i64>,
    /// Prompt tokens already through the model.
    prefilled: usize,
    generated: Vec<i64>,
    sampler: Sampler,
    stop: Vec<i64>,
    max_tokens: u32,
    finish: Option<FinishReason>,
}

/// The decode loop node over one model.
pub struct ARDecodeLoop {
    model: Arc<dyn CausalLm>,
    /// Value names: the prompt's ids in (int64 `[T]`), the generated ids out.
    input: String,
    output: String,
    /// Prompt tokens per prefill step, so a long prompt does not hold the scheduler.
    prefill_chunk: usize,
}

impl ARDecodeLoop {
    /// A loop reading the prompt's ids from value `input` and writing the generated ids to
    /// `output`, prefilling at most `prefill_chunk` prompt tokens per step.
    pub fn new(model: Arc<dyn CausalLm>, input: &str, output: &str, prefill_chunk: usize) -> Self {
        Self { model, input: input.into(), output: output.into(), prefill_chunk: prefill_chunk.max(1) }
    }
}

impl LoopStage for ARDecodeLoop {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let params: DecodeParams = match ctx.request.node_params.get(ctx.node) {
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| anyhow!("node_params.{}: {e}", ctx.node))?,
            None => DecodeParams::default(),
        };
        ensure!(params.max_tokens > 0, "max_tokens: must be at least 1");
        let sampler = Sampler::new(params.sampling())?;
        let prompt: Vec<i64> = Vec::try_from(values.tensor(&self.input)?.to_kind(Kind::Int64).view([-1]))?;
        ensure!(!prompt.is_empty(), "the prompt has no tokens");
        let limit = self.model.max_positions();
        ensure!(
            (prompt.len() as i64) < limit,
            "the prompt is {} tokens; this model takes {limit} positions in all",
            prompt.len()
        );
        let chunks = prompt.len().div_ceil(self.prefill_chunk) as u32;
        let mut stop = self.model.eos_tokens();
        stop.extend(&params.stop_token_ids);
        let d = Decoding {
            cache: self.model.new_cache(),
            prompt,
            prefilled: 0,
            generated: Vec::new(),
            sampler,
            stop,
            max_tokens: params.max_tokens,
            finish: None,
        };
        // The last prefill chunk also yields the first token.
        Ok(LoopState { step: 0, total_steps: chunks - 1 + params.max_tokens, inner: Box::new(d) })
    }

    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let d = state.get_mut::<Decoding>()?;
        if d.finish.is_some() {
            bail!("step after the decode loop finished");
        }
        let device = ctx.device;
        let input: Vec<i64> = if d.prefilled < d.prompt.len() {
            let end = (d.prefilled + self.prefill_chunk).min(d.prompt.len());
            let chunk = d.prompt[d.prefilled..end].to_vec();
            d.prefilled = end;
            chunk
        } else {
            vec![*d.generated.last().expect("a token after the prefill")]
        };
        let tokens = Tensor::from_slice(&input).to_device(device).unsqueeze(0);
        let logits = self.model.forward(&tokens, d.cache.as_mut())?;
        let mut result = StepResult { forwards: 1, ..Default::default() };
        if d.prefilled < d.prompt.len() {
            return Ok(result); // more prompt to read before the first token
        }
        let seen: Vec<i64> = d.prompt.iter().chain(&d.generated).copied().collect();
        let next = d.sampler.sample(&logits.select(1, -1).select(0, 0), &seen)?;
        let positions = (d.prompt.len() + d.generated.len() + 1) as i64;
        if d.stop.contains(&next) {
            d.finish = Some(FinishReason::Stop);
        } else {
            result.emit.push(OmniEvent::Token {
                request_id: ctx.request.request_id.clone(),
                node: ctx.node.to_string(),
                index: d.generated.len() as u32,
                token: next,
            });
            d.generated.push(next);
            if d.generated.len() as u32 >= d.max_tokens || positions >= self.model.max_positions() {
                d.finish = Some(FinishReason::Length);
            }
        }
        result.done = d.finish.is_some();
        Ok(result)
    }

    fn finalize(&self, _ctx: &NodeCtx, mut state: LoopState, values: &mut Values) -> Result<()> {
        let d = state.get_mut::<Decoding>()?;
        values.insert(self.output.clone(), Value::Tensor(Tensor::from_slice(&d.generated)));
        Ok(())
    }
}
