//! The model as the decode loop drives it ([`fastvideo_pipeline::token::CausalLm`]).

use std::any::Any;

use anyhow::{anyhow, Result};
use fastvideo_pipeline::token::CausalLm;
use tch::Tensor;

use crate::{KvCache, QwenForCausalLM};

impl CausalLm for QwenForCausalLM {
    fn new_cache(&self) -> Box<dyn Any + Send> {
        Box::new(self.cache())
    }

    fn forward(&self, tokens: &Tensor, cache: &mut (dyn Any + Send)) -> Result<Tensor> {
        let cache = cache.downcast_mut::<KvCache>().ok_or_else(|| anyhow!("not a Qwen key/value cache"))?;
        QwenForCausalLM::forward(self, tokens, cache)
    }

    fn max_positions(&self) -> i64 {
        self.config.max_position_embeddings
    }

    fn eos_tokens(&self) -> Vec<i64> {
        self.config.eos_token_ids.clone()
    }
}
