//! Choosing the next token from a row of logits: greedy, or temperature with top-k, top-p and a
//! repetition penalty, drawn from a per-request seeded generator so a request's output is
//! reproducible whatever else runs beside it. On the host: one row of logits per step.

use anyhow::{bail, Result};
use tch::{Device, Kind, Tensor};

/// A request's sampling parameters (OpenAI's names where they exist).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 is greedy (argmax).
    pub temperature: f64,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches this, in (0, 1].
    pub top_p: f64,
    /// Only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Logits of tokens already in the prompt or output are divided by this when positive and
    /// multiplied when negative (transformers' convention); 1 is off.
    pub repetition_penalty: f64,
    /// The seed of the request's generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self { temperature: 0.0, top_p: 1.0, top_k: 0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplingParams {
    /// The first invalid field and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(("temperature", format!("{} must be a finite number ≥ 0", self.temperature)));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(("top_p", format!("{} must be in (0, 1]", self.top_p)));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(("repetition_penalty", format!("{} must be a finite number > 0", self.repetition_penalty)));
        }
        Ok(())
    }
}

/// SplitMix64: small, fast, and the same sequence on every platform.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One request's sampler.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix,
}

impl Sampler {
    /// A sampler for `params`; invalid parameters are an error naming the field.
    pub fn new(params: SamplingParams) -> Result<Self> {
        if let Err((field, why)) = params.validate() {
            bail!("{field}: {why}");
        }
        let rng = SplitMix(params.seed);
        Ok(Self { params, rng })
    }

    /// Plain argmax (no temperature, no penalty): a batch's such rows take one argmax for all.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0 && self.params.repetition_penalty == 1.0
    }

    /// Whether [`Self::sample`] reads `seen` (only with a repetition penalty).
    pub fn uses_history(&self) -> bool {
        self.params.repetition_penalty != 1.0
    }

    /// The next token from `logits` (`[vocab]`, any dtype or device), `seen` being the tokens
    /// the repetition penalty applies to.
    pub fn sample(&mut self, logits: &Tensor, seen: &[i64]) -> Result<i64> {
        let p = &self.params;
        if self.is_greedy() {
            // Plain greedy: the argmax where the logits are, one number back to the host.
            if logits.numel() == 0 {
                bail!("empty logits");
            }
            return Ok(logits.view([-1]).argmax(0, false).int64_value(&[]));
        }
        let mut row: Vec<f32> = Vec::try_from(logits.to_kind(Kind::Float).to_device(Device::Cpu).view([-1]))?;
        if row.is_empty() {
            bail!("empty logits");
        }
        if p.repetition_penalty != 1.0 {
            let mut done = std::collections::HashSet::new();
            for &t in seen {
                if let Some(l) = row.get_mut(t as usize).filter(|_| t >= 0 && done.insert(t)) {
                    *l = if *l > 0.0 { *l / p.repetition_penalty as f32 } else { *l * p.repetition_penalty as f32 };
                }
            }
        }
        let argmax = |r: &[f32]| {
            r.iter()
                .enumerate()
                .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best })
                .0
        };
        if p.temperature == 0.0 {
            return Ok(argmax(&row) as i64);
        }
        // Candidates by descending logit; top-k, then the nucleus, then a draw.
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        if p.top_k > 0 {
            order.truncate(p.top_k);
        }
        let t = p.temperature as f32;
        let max = row[order[0]] / t;
        let mut probs: Vec<f64> = order.iter().map(|&i| ((row[i] / t - max) as f64).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
        let mut kept = 0;
        let mut mass = 0.0;
        for q in &probs {
            if kept > 0 && mass >= p.top_p {
                break;
            }
            mass += q;
            kept += 1;
        }
        let u = self.rng.next_f64() * mass;
        let mut acc = 0.0;
        for (k, q) in probs.iter().take(kept).enumerate() {
            acc += q;
            if u < acc {
                return Ok(order[k] as i64);
            }
        }
        Ok(order[kept - 1] as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(v: &[f32]) -> Tensor {
        Tensor::from_slice(v)
    }

    fn draws(params: SamplingParams, l: &Tensor, n: usize) -> Vec<i64> {
        let mut s = Sampler::new(params).unwrap();
        (0..n).map(|_| s.sample(l, &[]).unwrap()).collect()
    }

    #[test]
    fn greedy_is_argmax_and_the_penalty_moves_it() {
        let l = logits(&[1.0, 3.0, 2.9, -1.0]);
        let mut s = Sampler::new(SamplingParams::default()).unwrap();
        assert_eq!(s.sample(&l, &[]).unwrap(), 1);
        let mut p = Sampler::new(SamplingParams { repetition_penalty: 1.2, ..Default::default() }).unwrap();
        assert_eq!(p.sample(&l, &[1]).unwrap(), 2, "3.0 / 1.2 falls below 2.9");
    }

    #[test]
    fn a_seed_reproduces_its_draws_and_another_seed_differs() {
        let l = logits(&[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
        let p = SamplingParams { temperature: 1.0, seed: 7, ..Default::default() };
        let a = draws(p.clone(), &l, 64);
        assert_eq!(a, draws(p.clone(), &l, 64));
        assert_ne!(a, draws(SamplingParams { seed: 8, ..p }, &l, 64));
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 3, "a temperature-1 draw spreads");
    }

    #[test]
    fn top_k_and_top_p_restrict_the_candidates() {
        let l = logits(&[5.0, 4.0, 3.0, -2.0, -3.0]);
        let k2 = draws(SamplingParams { temperature: 2.0, top_k: 2, seed: 1, ..Default::default() }, &l, 200);
        assert!(k2.iter().all(|&t| t < 2) && k2.contains(&1));
        // Probabilities at temperature 1: ~0.665, 0.245, 0.090, ...: top_p 0.8 keeps two.
        let p8 = draws(SamplingParams { temperature: 1.0, top_p: 0.8, seed: 2, ..Default::default() }, &l, 300);
        assert!(p8.iter().all(|&t| t < 2) && p8.contains(&1));
        // The frequency of the top token follows its renormalised probability (0.731 ± 0.08).
        let share = p8.iter().filter(|&&t| t == 0).count() as f64 / 300.0;
        assert!((share - 0.731).abs() < 0.08, "share {share}");
    }

    #[test]
    fn bad_parameters_are_named() {
        for (p, field) in [
            (SamplingParams { temperature: -0.1, ..Default::default() }, "temperature"),
            (SamplingParams { top_p: 0.0, ..Default::default() }, "top_p"),
            (SamplingParams { top_p: 1.5, ..Default::default() }, "top_p"),
            (SamplingParams { repetition_penalty: 0.0, ..Default::default() }, "repetition_penalty"),
        ] {
            assert_eq!(p.validate().unwrap_err().0, field);
            assert!(Sampler::new(p).unwrap_err().to_string().starts_with(field));
        }
    }
}
