//! TEMPORARY placeholder until the sound tokenizer lands (replaced by sound/).
#![allow(missing_docs)]
use anyhow::Result;
use std::path::Path;
use tch::{Device, Kind, Tensor};
pub struct SoundTokenizer;
impl SoundTokenizer {
    pub fn load(_dir: &Path, _device: Device, _kind: Kind) -> Result<Self> {
        Ok(Self)
    }
    pub fn sample_rate(&self) -> u32 {
        96
    }
    pub fn hop(&self) -> i64 {
        6
    }
    pub fn channels(&self) -> i64 {
        2
    }
    pub fn decode(&self, latent: &Tensor) -> Result<Tensor> {
        Ok(Tensor::zeros([1, 2, latent.size()[2] * 6], (Kind::Float, Device::Cpu)))
    }
}
