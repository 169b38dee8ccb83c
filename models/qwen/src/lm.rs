//! The model as the decode loop drives it ([`fastvideo_pipeline::token::CausalLm`]).

use anyhow::Result;
use fastvideo_pipeline::token::{CausalLm, KvShape, KvStore};
use tch::Tensor;

use crate::QwenForCausalLM;

impl CausalLm for QwenForCausalLM {
    fn new_cache(&self) -> Box<dyn KvStore> {
        Box::new(self.cache())
    }

    fn kv_shape(&self) -> KvShape {
        QwenForCausalLM::kv_shape(self)
    }

    fn forward(&self, tokens: &Tensor, cache: &mut dyn KvStore) -> Result<Tensor> {
        QwenForCausalLM::forward(self, tokens, cache)
    }

    fn forward_decode(&self, tokens: &[i64], caches: &mut [&mut dyn KvStore]) -> Result<Tensor> {
        QwenForCausalLM::forward_decode(self, tokens, caches)
    }

    fn device(&self) -> tch::Device {
        QwenForCausalLM::device(self)
    }

    fn max_positions(&self) -> i64 {
        self.config.max_position_embeddings
    }

    fn eos_tokens(&self) -> Vec<i64> {
        self.config.eos_token_ids.clone()
    }
}
