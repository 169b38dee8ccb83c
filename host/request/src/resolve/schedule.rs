//! The step count and an explicit schedule: `diffusion.timesteps` (points of the 1000-step
//! training grid) or `diffusion.sigmas` (the same divided by 1000), the model's own list for a
//! distilled model (`fastvideo.json`), or a plain `num_inference_steps`.

use super::Defaults;
use crate::request::DiffusionParams;
use crate::{RequestError, SamplerKind};

/// `(steps, base noise levels)`: the list's length and its values over 1000, or the count with
/// no list. A request's list wins; then its count (the model's list applies when the count is
/// absent or equals the list's length); then the model's list; then the model's count.
pub(super) fn resolve(
    d: &DiffusionParams,
    def: &Defaults,
    max_steps: u32,
) -> Result<(u32, Option<Vec<f64>>), RequestError> {
    let given = match (&d.timesteps, &d.sigmas) {
        (Some(_), Some(_)) => {
            return Err(RequestError::new("diffusion.sigmas", "give `timesteps` or `sigmas`, not both"));
        }
        (Some(t), None) => Some(("diffusion.timesteps", t, 1000.0)),
        (None, Some(s)) => Some(("diffusion.sigmas", s, 1.0)),
        (None, None) => None,
    };
    if let Some((field, list, scale)) = given {
        let base = checked(field, list, scale, max_steps)?;
        if let Some(n) = d.num_inference_steps.filter(|&n| n as usize != base.len()) {
            return Err(RequestError::new(
                "diffusion.num_inference_steps",
                format!("{n} disagrees with the {} entries of {field}", base.len()),
            ));
        }
        return Ok((base.len() as u32, Some(base)));
    }
    let model = def.timesteps.as_ref().map(|t| checked("timesteps (the model's)", t, 1000.0, max_steps)).transpose()?;
    match (d.num_inference_steps, model) {
        (Some(n), Some(base)) if n as usize == base.len() => Ok((n, Some(base))),
        (Some(n), _) => Ok((in_range(n, max_steps)?, None)),
        (None, Some(base)) => Ok((base.len() as u32, Some(base))),
        (None, None) => Ok((in_range(def.steps, max_steps)?, None)),
    }
}

/// TurboDiffusion's intermediate TrigFlow times after `atan(sigma_max)`, in order.
const RCM_MID_TIMES: [f64; 3] = [1.5, 1.4, 1.0];

/// The schedule `sampler` runs: `rcm` makes its own from `sigma_max` (1 to 4 steps, no list
/// given); the others take the resolved one, and no `sigma_max`.
pub(super) fn for_sampler(
    sampler: SamplerKind,
    schedule: Option<Vec<f64>>,
    steps: u32,
    d: &DiffusionParams,
    sigma_max: Option<f64>,
) -> Result<Option<Vec<f64>>, RequestError> {
    if sampler != SamplerKind::Rcm {
        if sigma_max.is_some() {
            return Err(RequestError::new("sampling.sigma_max", "applies to the `rcm` sampler only"));
        }
        return Ok(schedule);
    }
    if d.timesteps.is_some() || d.sigmas.is_some() {
        let field = if d.timesteps.is_some() { "diffusion.timesteps" } else { "diffusion.sigmas" };
        return Err(RequestError::new(field, "the `rcm` sampler makes its own schedule from sampling.sigma_max"));
    }
    if steps > RCM_MID_TIMES.len() as u32 + 1 {
        return Err(RequestError::new(
            "diffusion.num_inference_steps",
            format!("{steps}: the `rcm` sampler runs 1 to {} steps", RCM_MID_TIMES.len() + 1),
        ));
    }
    rcm_levels(steps, sigma_max.unwrap_or(RCM_SIGMA_MAX)).map(Some)
}

/// `rcm`'s default `sigma_max` (TurboDiffusion's for Wan 2.1).
pub const RCM_SIGMA_MAX: f64 = 80.0;

/// rCM's flow levels for `steps` steps (1 to 4) from `sigma_max`: TrigFlow times
/// `atan(sigma_max)`, 1.5, 1.4, 1.0 as `sin t / (sin t + cos t)`. The first time must exceed
/// the second (`sigma_max` above tan 1.5 ≈ 14.1 for 2 steps or more), else the noise would rise.
pub fn rcm_levels(steps: u32, sigma_max: f64) -> Result<Vec<f64>, RequestError> {
    if !sigma_max.is_finite() || sigma_max <= 0.0 {
        return Err(RequestError::new("sampling.sigma_max", format!("{sigma_max} must be positive")));
    }
    let times: Vec<f64> = std::iter::once(sigma_max.atan()).chain(RCM_MID_TIMES).take(steps as usize).collect();
    if times.len() > 1 && times[0] <= times[1] {
        return Err(RequestError::new(
            "sampling.sigma_max",
            format!("{sigma_max} puts the first step below the second (give more than tan 1.5 ≈ 14.1)"),
        ));
    }
    Ok(times.iter().map(|t| t.sin() / (t.cos() + t.sin())).collect())
}

fn in_range(steps: u32, max_steps: u32) -> Result<u32, RequestError> {
    if steps == 0 || steps > max_steps {
        return Err(RequestError::new("diffusion.num_inference_steps", format!("{steps} is outside 1..={max_steps}")));
    }
    Ok(steps)
}

/// `list` over `scale`, checked: 1..=max_steps entries, each finite in `(0, scale]`, strictly
/// descending.
fn checked(field: &str, list: &[f64], scale: f64, max_steps: u32) -> Result<Vec<f64>, RequestError> {
    if list.is_empty() || list.len() > max_steps as usize {
        return Err(RequestError::new(field, format!("{} entries; give 1..={max_steps}", list.len())));
    }
    for (i, &v) in list.iter().enumerate() {
        if !v.is_finite() || (v / scale) as f32 <= 0.0 || v > scale {
            return Err(RequestError::new(format!("{field}[{i}]"), format!("{v} is outside (0, {scale}]")));
        }
        // Compared as the samplers store them (float32): equal there is not descending.
        if i > 0 && (v / scale) as f32 >= (list[i - 1] / scale) as f32 {
            return Err(RequestError::new(
                format!("{field}[{i}]"),
                format!("{v} does not descend from {} (a schedule runs from noise to clean)", list[i - 1]),
            ));
        }
    }
    Ok(list.iter().map(|v| v / scale).collect())
}
