//! `ARDecodeLoop`: autoregressive decoding as a loop node. `init` takes the prompt's token ids
//! (a tensor value) and the request's decode parameters (its per-node parameters), `step` runs
//! one bounded unit — a prefill chunk of at most `prefill_chunk` prompt tokens, or one generated
//! token — and `finalize` stores the generated ids. The step boundary is where the scheduler
//! interleaves other requests' token and denoise steps, cancels, and streams (one `token` event
//! per generated token).

use std::sync::Arc;

use anyhow::{anyhow, bail, ensure, Result};
use fastvideo_request::{OmniEvent, RequestError, ResolvedRequest};
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use super::kv::{KvBlockPool, KvShape, KvStore, PagedKv};
use super::sampling::{Sampler, SamplingParams};
use crate::{LoopStage, LoopState, NodeCtx, StepResult, Value, Values};

/// A causal language model as the loop drives it.
pub trait CausalLm: Send + Sync {
    /// A fresh contiguous per-request key/value cache.
    fn new_cache(&self) -> Box<dyn KvStore>;
    /// The shape of its key/value cache (to size a [`KvBlockPool`](super::KvBlockPool)).
    fn kv_shape(&self) -> KvShape;
    /// Logits `[1, T, vocab]` for `tokens [1, T]` following the positions in `cache`, which it
    /// extends by `T`.
    fn forward(&self, tokens: &Tensor, cache: &mut dyn KvStore) -> Result<Tensor>;
    /// Logits `[B, vocab]` for one new token of each of `B` requests (`tokens[i]` after the
    /// positions in `caches[i]`, which it extends by one): the decode steps of many requests as
    /// one forward. The default runs them one by one.
    fn forward_decode(&self, tokens: &[i64], caches: &mut [&mut dyn KvStore]) -> Result<Tensor> {
        let rows = tokens
            .iter()
            .zip(caches.iter_mut())
            .map(|(&t, c)| {
                let device = self.device();
                Ok(self.forward(&Tensor::from_slice(&[t]).to_device(device).view([1, 1]), &mut **c)?.select(1, -1))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&rows, 0))
    }
    /// Where its weights live.
    fn device(&self) -> Device;
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

/// Admission's check of a request's decode parameters (`node_params.<node>`), so a bad one is a
/// 400 naming the field rather than a failure when its decode starts. `prefix` goes before the
/// field names (empty for chat, whose fields are OpenAI's).
pub fn check_decode(r: &ResolvedRequest, node: &str, prefix: &str) -> Result<(), RequestError> {
    let Some(v) = r.node_params.get(node) else { return Ok(()) };
    let p: DecodeParams = serde_json::from_value(v.clone())
        .map_err(|e| RequestError::new(format!("node_params.{node}"), e.to_string()))?;
    if p.max_tokens == 0 {
        return Err(RequestError::new(format!("{prefix}max_tokens"), "at least 1"));
    }
    p.sampling().validate().map_err(|(field, why)| RequestError::new(format!("{prefix}{field}"), why))
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

/// One request's generation in progress: the decode loop's state, usable without the loop
/// (the CLI drives it directly).
pub struct Generation {
    cache: Box<dyn KvStore>,
    prompt: Vec<i64>,
    /// Prompt tokens already through the model.
    prefilled: usize,
    generated: Vec<i64>,
    sampler: Sampler,
    stop: Vec<i64>,
    max_tokens: u32,
    max_positions: i64,
    finish: Option<FinishReason>,
}

impl Generation {
    /// Checks the prompt and parameters against `model` (errors name the field) and starts with
    /// a contiguous cache. `stop` adds stop ids to the model's EOS and the request's.
    pub fn new(model: &dyn CausalLm, prompt: Vec<i64>, params: &DecodeParams, stop: &[i64]) -> Result<Self> {
        Self::with_cache(model, model.new_cache(), prompt, params, stop)
    }

    /// [`Self::new`] with the cache given (a [`PagedKv`] on a shared pool).
    pub fn with_cache(
        model: &dyn CausalLm,
        cache: Box<dyn KvStore>,
        prompt: Vec<i64>,
        params: &DecodeParams,
        stop: &[i64],
    ) -> Result<Self> {
        ensure!(params.max_tokens > 0, "max_tokens: must be at least 1");
        let sampler = Sampler::new(params.sampling())?;
        ensure!(!prompt.is_empty(), "the prompt has no tokens");
        let max_positions = model.max_positions();
        ensure!(
            (prompt.len() as i64) < max_positions,
            "the prompt is {} tokens; this model takes {max_positions} positions in all",
            prompt.len()
        );
        let mut all_stops = model.eos_tokens();
        all_stops.extend(&params.stop_token_ids);
        all_stops.extend(stop);
        Ok(Self {
            cache,
            prompt,
            prefilled: 0,
            generated: Vec::new(),
            sampler,
            stop: all_stops,
            max_tokens: params.max_tokens,
            max_positions,
            finish: None,
        })
    }

    /// Steps a loop over this prompt takes at most with chunks of `prefill_chunk`.
    pub fn max_steps(&self, prefill_chunk: usize) -> u32 {
        self.prompt.len().div_ceil(prefill_chunk.max(1)) as u32 - 1 + self.max_tokens
    }

    /// One bounded unit: a prefill chunk of at most `prefill_chunk` prompt tokens, or one token.
    /// Returns the token generated, if this step generated one (a stop token is not returned).
    pub fn step(&mut self, model: &dyn CausalLm, device: Device, prefill_chunk: usize) -> Result<Option<i64>> {
        if self.finish.is_some() {
            bail!("step after the generation finished");
        }
        let input: Vec<i64> = if self.prefilled < self.prompt.len() {
            let end = (self.prefilled + prefill_chunk.max(1)).min(self.prompt.len());
            let chunk = self.prompt[self.prefilled..end].to_vec();
            self.prefilled = end;
            chunk
        } else {
            vec![self.decode_input()]
        };
        let tokens = Tensor::from_slice(&input).to_device(device).unsqueeze(0);
        let logits = model.forward(&tokens, self.cache.as_mut())?;
        if self.prefilled < self.prompt.len() {
            return Ok(None); // more prompt to read before the first token
        }
        self.absorb(&logits.select(1, -1).select(0, 0))
    }

    /// Whether the next step is a single-token decode step (the prompt read, a token out, not
    /// finished): the steps that batch across requests.
    pub fn decoding(&self) -> bool {
        self.finish.is_none() && self.prefilled == self.prompt.len() && !self.generated.is_empty()
    }

    /// The token the next decode step feeds.
    pub fn decode_input(&self) -> i64 {
        *self.generated.last().expect("a token after the prefill")
    }

    /// The cache the next forward extends.
    pub fn cache_mut(&mut self) -> &mut dyn KvStore {
        self.cache.as_mut()
    }

    /// Chooses the next token from the last position's logits (`[vocab]`) and applies the stop
    /// rules; returns it unless it stopped the generation.
    pub fn absorb(&mut self, logits: &Tensor) -> Result<Option<i64>> {
        // The history is copied only when the repetition penalty reads it.
        let seen: Vec<i64> = match self.sampler.uses_history() {
            true => self.prompt.iter().chain(&self.generated).copied().collect(),
            false => Vec::new(),
        };
        let next = self.sampler.sample(logits, &seen)?;
        Ok(self.take(next))
    }

    /// The next token of each of a decode batch from its row of `logits` (`[B, vocab]`): the
    /// plain-greedy rows by one argmax and one copy to the host for all, the others by their
    /// own samplers.
    pub fn absorb_batch(gens: &mut [&mut Generation], logits: &Tensor) -> Vec<Result<Option<i64>>> {
        let picks: Option<Vec<i64>> = gens
            .iter()
            .any(|g| g.sampler.is_greedy())
            .then(|| Vec::try_from(logits.argmax(-1, false).to_device(Device::Cpu)).ok())
            .flatten();
        gens.iter_mut()
            .enumerate()
            .map(|(i, g)| match (&picks, g.sampler.is_greedy()) {
                (Some(p), true) => Ok(g.take(p[i])),
                _ => g.absorb(&logits.get(i as i64)),
            })
            .collect()
    }

    /// Applies the stop rules to the chosen token; returns it unless it stopped the generation.
    fn take(&mut self, next: i64) -> Option<i64> {
        if self.stop.contains(&next) {
            self.finish = Some(FinishReason::Stop);
            return None;
        }
        self.generated.push(next);
        let positions = (self.prompt.len() + self.generated.len()) as i64;
        if self.generated.len() as u32 >= self.max_tokens || positions >= self.max_positions {
            self.finish = Some(FinishReason::Length);
        }
        Some(next)
    }

    /// Ends the generation from outside (a stop string the front end found in the text).
    pub fn finish_now(&mut self, reason: FinishReason) {
        self.finish.get_or_insert(reason);
    }

    /// Why it ended; `None` while it runs.
    pub fn finish(&self) -> Option<FinishReason> {
        self.finish
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[i64] {
        &self.generated
    }

    /// The prompt's length in tokens.
    pub fn prompt_len(&self) -> usize {
        self.prompt.len()
    }
}

/// The decode loop node over one model.
pub struct ARDecodeLoop {
    model: Arc<dyn CausalLm>,
    /// Value names: the prompt's ids in (int64 `[T]`), the generated ids out.
    input: String,
    output: String,
    /// Prompt tokens per prefill step, so a long prompt does not hold the scheduler.
    prefill_chunk: usize,
    /// Paged key/value blocks shared by this loop's requests (else each has a contiguous cache).
    pool: Option<Arc<KvBlockPool>>,
    stop: Vec<i64>,
    /// Parameters a request's `node_params` start from (an object; none: [`DecodeParams`]'s).
    defaults: serde_json::Map<String, serde_json::Value>,
}

impl ARDecodeLoop {
    /// A loop reading the prompt's ids from value `input` and writing the generated ids to
    /// `output`, prefilling at most `prefill_chunk` prompt tokens per step.
    pub fn new(model: Arc<dyn CausalLm>, input: &str, output: &str, prefill_chunk: usize) -> Self {
        Self {
            model,
            input: input.into(),
            output: output.into(),
            prefill_chunk: prefill_chunk.max(1),
            pool: None,
            stop: Vec::new(),
            defaults: serde_json::Map::new(),
        }
    }

    /// Decode parameters that requests start from, e.g. a short `max_tokens` for a prompt
    /// rewriter; the fields a request gives win.
    pub fn with_defaults(mut self, defaults: serde_json::Value) -> Self {
        if let serde_json::Value::Object(m) = defaults {
            self.defaults = m;
        }
        self
    }

    /// Requests take their key/value blocks from `pool` (returned when each request ends, also
    /// on failure or cancellation).
    pub fn with_pool(mut self, pool: Arc<KvBlockPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Token ids that end every generation besides the model's EOS (a folder's
    /// `generation_config.json` and tokenizer EOS).
    pub fn with_stop(mut self, stop: Vec<i64>) -> Self {
        self.stop = stop;
        self
    }
}

/// One step's result: done when the generation finished, a `token` event for a new token.
fn step_result(ctx: &NodeCtx, g: &Generation, token: Option<i64>) -> StepResult {
    let mut result = StepResult { forwards: 1, done: g.finish().is_some(), ..Default::default() };
    if let Some(token) = token {
        result.emit.push(OmniEvent::Token {
            request_id: ctx.request.request_id.clone(),
            node: ctx.node.to_string(),
            index: g.tokens().len() as u32 - 1,
            token,
        });
    }
    result
}

impl LoopStage for ARDecodeLoop {
    fn init(&self, ctx: &NodeCtx, values: &mut Values) -> Result<LoopState> {
        let mut merged = self.defaults.clone();
        match ctx.request.node_params.get(ctx.node) {
            Some(serde_json::Value::Object(given)) => merged.extend(given.clone()),
            Some(other) => bail!("node_params.{}: {other} is not an object", ctx.node),
            None => {}
        }
        let params: DecodeParams = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| anyhow!("node_params.{}: {e}", ctx.node))?;
        let prompt: Vec<i64> = Vec::try_from(values.tensor(&self.input)?.to_kind(Kind::Int64).view([-1]))?;
        let cache: Box<dyn KvStore> = match &self.pool {
            Some(pool) => {
                // The whole request's blocks now: a full pool fails this request as it starts,
                // never a running batch of others mid-step.
                let mut paged = PagedKv::new(pool.clone());
                let positions = (prompt.len() as i64 + params.max_tokens as i64).min(self.model.max_positions());
                paged.reserve(positions).map_err(|e| anyhow::Error::new(crate::WaitForRoom(format!("{e:#}"))))?;
                Box::new(paged)
            }
            None => self.model.new_cache(),
        };
        let g = Generation::with_cache(self.model.as_ref(), cache, prompt, &params, &self.stop)?;
        // The last prefill chunk also yields the first token.
        Ok(LoopState { step: 0, total_steps: g.max_steps(self.prefill_chunk), inner: Box::new(g) })
    }

    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> Result<StepResult> {
        let g = state.get_mut::<Generation>()?;
        let token = g.step(self.model.as_ref(), ctx.device, self.prefill_chunk)?;
        Ok(step_result(ctx, g, token))
    }

    /// Decode steps of any requests of this loop batch (one forward for all); prefill steps run
    /// alone.
    fn batch_key(&self, _ctx: &NodeCtx, state: &LoopState) -> Option<u64> {
        let g = state.inner.downcast_ref::<Generation>()?;
        g.decoding().then_some(Arc::as_ptr(&self.model) as *const () as u64)
    }

    fn step_batch(&self, ctxs: &[NodeCtx], states: &mut [&mut LoopState]) -> Vec<Result<StepResult>> {
        let mut gens: Vec<&mut Generation> = match states.iter_mut().map(|s| s.get_mut::<Generation>()).collect() {
            Ok(g) => g,
            Err(e) => return ctxs.iter().map(|_| Err(anyhow!("{e}"))).collect(),
        };
        if gens.iter().any(|g| !g.decoding()) {
            return ctxs.iter().map(|_| Err(anyhow!("step_batch: a request is not at a decode step"))).collect();
        }
        let tokens: Vec<i64> = gens.iter().map(|g| g.decode_input()).collect();
        let logits = {
            let mut caches: Vec<&mut dyn KvStore> = gens.iter_mut().map(|g| g.cache_mut()).collect();
            self.model.forward_decode(&tokens, &mut caches)
        };
        let logits = match logits {
            Ok(l) => l,
            Err(e) => return ctxs.iter().map(|_| Err(anyhow!("{e:#}"))).collect(),
        };
        let tokens = Generation::absorb_batch(&mut gens, &logits);
        gens.iter().zip(ctxs).zip(tokens).map(|((g, ctx), token)| Ok(step_result(ctx, g, token?))).collect()
    }

    fn finalize(&self, _ctx: &NodeCtx, mut state: LoopState, values: &mut Values) -> Result<()> {
        let g = state.get_mut::<Generation>()?;
        values.insert(self.output.clone(), Value::Tensor(Tensor::from_slice(g.tokens())));
        Ok(())
    }
}
