//! LTX-2's guidance, per stream: the passes' velocities turned into clean-sample estimates
//! (`x0 = x − σ·v`), combined as deltas from the conditional one — classifier-free guidance
//! `(G − 1)(x0_c − x0_uncond)`, spatio-temporal guidance `S(x0_c − x0_perturbed)`, modality
//! guidance `(M − 1)(x0_c − x0_isolated)` — rescaled against the conditional estimate's
//! spread, and turned back into a velocity for the sampler. Video and audio each have their
//! own scales; a pass absent contributes nothing.

use tch::{Kind, Tensor};

/// One stream's guidance scales (`LTX2Pipeline`'s `guidance_scale`, `stg_scale`,
/// `modality_scale`, `guidance_rescale`, or their `audio_` twins).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    /// Classifier-free guidance (1 is off).
    pub cfg: f64,
    /// Spatio-temporal guidance (0 is off).
    pub stg: f64,
    /// Modality guidance (1 is off).
    pub modality: f64,
    /// Rescale toward the conditional estimate's standard deviation (0 is off).
    pub rescale: f64,
}

/// One stream's velocities from each pass of a step.
pub struct Passes<'a> {
    /// With the prompt.
    pub cond: &'a Tensor,
    /// With the negative prompt (classifier-free guidance).
    pub uncond: Option<&'a Tensor>,
    /// With the STG blocks' self-attention perturbed.
    pub perturbed: Option<&'a Tensor>,
    /// With the audio-video exchange off.
    pub isolated: Option<&'a Tensor>,
}

/// The guided velocity of the stream at `x` (noise level `sigma`), in float32.
pub fn guided_velocity(x: &Tensor, sigma: f64, p: &Passes, s: &Scales) -> Tensor {
    (x.to_kind(Kind::Float) - guided_x0(x, sigma, p, s)) / sigma
}

/// The guided clean-sample estimate of the stream at `x` (noise level `sigma`), in float32.
pub fn guided_x0(x: &Tensor, sigma: f64, p: &Passes, s: &Scales) -> Tensor {
    let x = x.to_kind(Kind::Float);
    let x0 = |v: &Tensor| &x - v.to_kind(Kind::Float) * sigma;
    let cond = x0(p.cond);
    // A copy: the deltas add in place and `cond` is the rescale's reference.
    let mut guided = cond.copy();
    if let Some(u) = p.uncond {
        guided += (&cond - x0(u)) * (s.cfg - 1.0);
    }
    if let Some(q) = p.perturbed {
        guided += (&cond - x0(q)) * s.stg;
    }
    if let Some(i) = p.isolated {
        guided += (&cond - x0(i)) * (s.modality - 1.0);
    }
    if s.rescale > 0.0 {
        guided = rescale(&guided, &cond, s.rescale);
    }
    guided
}

/// `rescale_noise_cfg`: `guided` scaled to `reference`'s standard deviation per sample, mixed
/// back by `amount`.
pub fn rescale(guided: &Tensor, reference: &Tensor, amount: f64) -> Tensor {
    let dims: Vec<i64> = (1..guided.dim() as i64).collect();
    let std = |t: &Tensor| t.std_dim(dims.as_slice(), true, true);
    let rescaled = guided * (std(reference) / std(guided));
    rescaled * amount + guided * (1.0 - amount)
}
