//! Predicted time and memory of a request, calibrated from what the executor measures.
//!
//! A request's work is `steps x step_seconds + one_shot_seconds` (text encode, VAE decode and the
//! rest). Both terms are learned per [`CostKey`] (the model's own unit of work, tokens, and the
//! guidance mode; the step count is a multiplier, not part of the key) as exponential moving
//! averages of measured times. A key never seen is predicted from the throughput measured on any
//! other key (seconds per token-forward), and before anything was measured from the configured
//! prior.

use std::collections::HashMap;

use fastvideo_request::ResolvedRequest;

/// What the cost of one step depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CostKey {
    /// Tokens one forward processes, as the model counts them ([`fastvideo_pipeline::WorkCount`]:
    /// Wan's transformer sequence, a language model's decode positions). Sizes that make as many
    /// tokens share a key: they cost the same.
    pub tokens: u64,
    /// Forwards of the main network per step (2 with classifier-free guidance).
    pub forwards: u32,
    /// Which of the engine's models (0: the primary): each learns its own step times.
    pub model: u32,
}

impl CostKey {
    /// The key of a resolved request to served model `model`, of `tokens` per forward (the
    /// model's count for it), with its guidance mode.
    pub fn of(req: &ResolvedRequest, tokens: u64, model: u32) -> Self {
        Self { tokens, forwards: if req.does_cfg() { 2 } else { 1 }, model }
    }

    fn ktokens(&self) -> f64 {
        self.tokens as f64 / 1e3
    }

    fn ktoken_forwards(&self) -> f64 {
        self.ktokens() * self.forwards as f64
    }
}

/// Weight of the newest measurement in the moving averages.
const EWMA: f64 = 0.2;

fn blend(old: Option<f64>, new: f64) -> f64 {
    match old {
        Some(o) => o + EWMA * (new - o),
        None => new,
    }
}

/// Priors and the memory rule; see `docs/operators.md` for how to set them. Per token, the
/// model's unit of work (a Wan token stands for about a thousand output pixels: 870 at
/// 17x64x64, 987 at 81x480x832).
#[derive(Debug, Clone, Copy)]
pub struct CostConfig {
    /// Seconds per step per thousand token-forwards before anything was measured.
    pub prior_step_seconds_per_ktoken_forward: f64,
    /// One-shot seconds per thousand tokens before anything was measured.
    pub prior_one_shot_seconds_per_ktoken: f64,
    /// Predicted bytes a request holds while active, per token-forward (latents, activations,
    /// the decoded frames), plus `base_bytes`.
    pub bytes_per_token: u64,
    /// Predicted bytes a request holds whatever its size.
    pub base_bytes: u64,
}

impl Default for CostConfig {
    fn default() -> Self {
        // Measured on the default model on a 2-core CPU: 12.6 ms per CFG step at 17x64x64
        // (80 tokens x 2 forwards), ~0.4 s of text encode + decode. Memory: 2 KiB per output
        // pixel, 870 pixels a token at that size.
        Self {
            prior_step_seconds_per_ktoken_forward: 0.079,
            prior_one_shot_seconds_per_ktoken: 5.0,
            bytes_per_token: 2048 * 870,
            base_bytes: 16 << 20,
        }
    }
}

impl CostConfig {
    /// Priors for a CUDA device. Measured on the H200 with Wan2.1-1.3B in bf16 at 480x832x81
    /// (docs/benchmarks.md): 1.03 s per CFG step over 32 760 tokens x 2 forwards; text encode
    /// and decode 2.65 s; device memory grew 7.7 GB past the loaded model over a CFG step, a
    /// batch-2 forward and a decode (these priors, 150 bytes per output pixel at 987 pixels a
    /// token, predict 9.9 GB). The CPU figures would predict 117 GB for that request and refuse
    /// it.
    pub fn cuda() -> Self {
        Self {
            prior_step_seconds_per_ktoken_forward: 0.016,
            prior_one_shot_seconds_per_ktoken: 0.081,
            bytes_per_token: 150 * 987,
            base_bytes: 256 << 20,
        }
    }

    /// [`CostConfig::cuda`] on CUDA, the CPU-measured default elsewhere.
    pub fn for_device(cuda: bool) -> Self {
        if cuda {
            Self::cuda()
        } else {
            Self::default()
        }
    }
}

/// The learned cost model.
#[derive(Debug)]
pub struct CostModel {
    cfg: CostConfig,
    step: HashMap<CostKey, f64>,
    one_shot: HashMap<CostKey, f64>,
    /// Seconds per thousand token-forwards over all measured steps.
    step_rate: Option<f64>,
    /// One-shot seconds per thousand tokens over all measured requests.
    one_shot_rate: Option<f64>,
}

impl CostModel {
    /// A model that knows only `cfg`'s priors until it measures something.
    pub fn new(cfg: CostConfig) -> Self {
        Self { cfg, step: HashMap::new(), one_shot: HashMap::new(), step_rate: None, one_shot_rate: None }
    }

    /// Predicted seconds of one denoise step.
    pub fn step_seconds(&self, key: &CostKey) -> f64 {
        self.step.get(key).copied().unwrap_or_else(|| {
            key.ktoken_forwards() * self.step_rate.unwrap_or(self.cfg.prior_step_seconds_per_ktoken_forward)
        })
    }

    /// Predicted seconds of all one-shot stages of a request.
    pub fn one_shot_seconds(&self, key: &CostKey) -> f64 {
        self.one_shot
            .get(key)
            .copied()
            .unwrap_or_else(|| key.ktokens() * self.one_shot_rate.unwrap_or(self.cfg.prior_one_shot_seconds_per_ktoken))
    }

    /// Predicted seconds of a whole request.
    pub fn request_seconds(&self, key: &CostKey, steps: u32) -> f64 {
        steps as f64 * self.step_seconds(key) + self.one_shot_seconds(key)
    }

    /// Predicted seconds left of a request with `steps_left` denoise steps to go that has spent
    /// `one_shot_spent` seconds in one-shot stages.
    pub fn remaining_seconds(&self, key: &CostKey, steps_left: u32, one_shot_spent: f64) -> f64 {
        steps_left as f64 * self.step_seconds(key) + (self.one_shot_seconds(key) - one_shot_spent).max(0.0)
    }

    /// Predicted bytes a request holds while it is active.
    pub fn memory_bytes(&self, key: &CostKey) -> u64 {
        self.cfg.base_bytes + self.cfg.bytes_per_token.saturating_mul(key.tokens).saturating_mul(key.forwards as u64)
    }

    /// A measured denoise step: updates the key's average and the throughput unseen keys are
    /// predicted from.
    pub fn observe_step(&mut self, key: &CostKey, seconds: f64) {
        let old = self.step.get(key).copied();
        self.step.insert(*key, blend(old, seconds));
        self.step_rate = Some(blend(self.step_rate, seconds / key.ktoken_forwards()));
    }

    /// A finished request's total one-shot time.
    pub fn observe_one_shot(&mut self, key: &CostKey, seconds: f64) {
        let old = self.one_shot.get(key).copied();
        self.one_shot.insert(*key, blend(old, seconds));
        self.one_shot_rate = Some(blend(self.one_shot_rate, seconds / key.ktokens()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Wan's tokens: 17 frames are 5 latent frames, 64x64 is 4x4 patches of 16 pixels.
    const SMALL: CostKey = CostKey { tokens: 5 * 4 * 4, forwards: 2, model: 0 };
    const BIG: CostKey = CostKey { tokens: 5 * 8 * 8, forwards: 2, model: 0 };

    #[test]
    fn unseen_keys_use_the_prior_then_measured_throughput() {
        let mut m = CostModel::new(CostConfig::default());
        let prior = m.step_seconds(&SMALL);
        assert!((prior - 0.079 * SMALL.ktoken_forwards()).abs() < 1e-12);
        m.observe_step(&SMALL, 0.5);
        assert_eq!(m.step_seconds(&SMALL), 0.5);
        // Four times the tokens: predicted from the measured rate, not the prior.
        assert!((m.step_seconds(&BIG) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn measurements_move_the_prediction_gradually() {
        let mut m = CostModel::new(CostConfig::default());
        m.observe_step(&SMALL, 1.0);
        m.observe_step(&SMALL, 2.0);
        let p = m.step_seconds(&SMALL);
        assert!(p > 1.0 && p < 2.0, "{p}");
    }

    #[test]
    fn request_cost_scales_with_steps_and_counts_one_shots_once() {
        let mut m = CostModel::new(CostConfig::default());
        m.observe_step(&SMALL, 0.1);
        m.observe_one_shot(&SMALL, 0.3);
        assert!((m.request_seconds(&SMALL, 4) - 0.7).abs() < 1e-9);
        assert!((m.request_seconds(&SMALL, 50) - 5.3).abs() < 1e-9);
        assert!((m.remaining_seconds(&SMALL, 2, 0.1) - 0.4).abs() < 1e-9);
        assert_eq!(m.remaining_seconds(&SMALL, 0, 1.0), 0.0);
    }

    #[test]
    fn cuda_priors_admit_a_real_size_request_on_one_gpu() {
        // 81x480x832: 21 latent frames of 30x52 patches.
        let real = CostKey { tokens: 21 * 30 * 52, forwards: 2, model: 0 };
        let gpu = CostModel::new(CostConfig::for_device(true));
        let bytes = gpu.memory_bytes(&real);
        assert!(bytes > 4 << 30 && bytes < 16 << 30, "{bytes}");
        // Within 2x of the measured 1.03 s CFG step before anything was measured.
        let step = gpu.step_seconds(&real);
        assert!((0.5..2.1).contains(&step), "{step}");
        assert!(CostModel::new(CostConfig::for_device(false)).memory_bytes(&real) > bytes);
    }

    #[test]
    fn memory_grows_with_pixels_and_guidance() {
        let m = CostModel::new(CostConfig::default());
        let no_cfg = CostKey { forwards: 1, ..SMALL };
        assert!(m.memory_bytes(&BIG) > m.memory_bytes(&SMALL));
        assert!(m.memory_bytes(&SMALL) > m.memory_bytes(&no_cfg));
    }
}
