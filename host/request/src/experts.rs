//! Two-expert models (Wan 2.2 A14B): the high-noise expert runs the steps whose timestep is at or
//! above `boundary_ratio × 1000`, the low-noise expert the rest, with its own guidance scale.
//! A model declares its defaults; a request may override both, checked here.

use serde::{Deserialize, Serialize};

use crate::RequestError;

/// What a two-expert model uses when a request leaves the expert fields out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpertDefaults {
    /// The switch point as a fraction of the training timesteps (`model_index.json`'s
    /// `boundary_ratio`: 0.875 for Wan2.2-T2V-A14B, 0.9 for I2V).
    pub boundary_ratio: f32,
    /// The low-noise expert's guidance scale; absent: the request's `guidance_scale`, as
    /// diffusers does.
    pub guidance_scale_2: Option<f32>,
}

/// A request's expert parameters, concrete.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpertParams {
    /// In `[0, 1]`: 0 runs the high-noise expert throughout, 1 the low-noise one from the
    /// first step below timestep 1000.
    pub boundary_ratio: f32,
    /// The low-noise expert's guidance scale, in `0..=100`.
    pub guidance_scale_2: f32,
    /// The low-noise expert from this step (0-based) on, instead of the boundary rule: how
    /// ComfyUI's chained samplers split the schedule. At most the request's steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_step: Option<u32>,
}

/// A request's expert fields, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExpertFields {
    /// `diffusion.boundary_ratio`.
    pub boundary_ratio: Option<f32>,
    /// `diffusion.guidance_scale_2`.
    pub guidance_scale_2: Option<f32>,
    /// `diffusion.switch_step`.
    pub switch_step: Option<u32>,
}

/// The request's expert fields against the model's: refused (named) on a one-expert model,
/// range-checked otherwise.
pub fn resolve_experts(
    model: Option<&ExpertDefaults>,
    given: ExpertFields,
    guidance_scale: f32,
    steps: u32,
    family: &str,
) -> Result<Option<ExpertParams>, RequestError> {
    let ExpertFields { boundary_ratio, guidance_scale_2, switch_step } = given;
    let Some(def) = model else {
        for (field, given) in [
            ("diffusion.boundary_ratio", boundary_ratio.is_some()),
            ("diffusion.guidance_scale_2", guidance_scale_2.is_some()),
            ("diffusion.switch_step", switch_step.is_some()),
        ] {
            if given {
                return Err(RequestError::new(
                    field,
                    format!("applies to two-expert models (Wan 2.2 A14B); this {family} model has one transformer"),
                ));
            }
        }
        return Ok(None);
    };
    let boundary_ratio = boundary_ratio.unwrap_or(def.boundary_ratio);
    if !(0.0..=1.0).contains(&boundary_ratio) {
        return Err(RequestError::new("diffusion.boundary_ratio", format!("{boundary_ratio} must be in [0, 1]")));
    }
    let guidance_scale_2 = guidance_scale_2.or(def.guidance_scale_2).unwrap_or(guidance_scale);
    if !guidance_scale_2.is_finite() || !(0.0..=100.0).contains(&guidance_scale_2) {
        return Err(RequestError::new("diffusion.guidance_scale_2", format!("{guidance_scale_2} is outside 0..=100")));
    }
    if let Some(s) = switch_step {
        if given.boundary_ratio.is_some() {
            return Err(RequestError::new("diffusion.switch_step", "give boundary_ratio or switch_step, not both"));
        }
        if s > steps {
            return Err(RequestError::new("diffusion.switch_step", format!("{s} is past the request's {steps} steps")));
        }
    }
    Ok(Some(ExpertParams { boundary_ratio, guidance_scale_2, switch_step }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A14B: ExpertDefaults = ExpertDefaults { boundary_ratio: 0.875, guidance_scale_2: Some(3.0) };

    fn f(boundary_ratio: Option<f32>, guidance_scale_2: Option<f32>, switch_step: Option<u32>) -> ExpertFields {
        ExpertFields { boundary_ratio, guidance_scale_2, switch_step }
    }

    #[test]
    fn a_switch_step_replaces_the_boundary_within_the_schedule() {
        let p = resolve_experts(Some(&A14B), f(None, None, Some(10)), 4.0, 20, "Wan").unwrap().unwrap();
        assert_eq!(p.switch_step, Some(10));
        for (given, steps) in [(f(None, None, Some(21)), 20), (f(Some(0.9), None, Some(3)), 20)] {
            assert_eq!(
                resolve_experts(Some(&A14B), given, 4.0, steps, "Wan").unwrap_err().field,
                "diffusion.switch_step"
            );
        }
        let e = resolve_experts(None, f(None, None, Some(3)), 4.0, 20, "Wan").unwrap_err();
        assert_eq!(e.field, "diffusion.switch_step");
    }

    #[test]
    fn defaults_fill_and_requests_override() {
        let p = resolve_experts(Some(&A14B), f(None, None, None), 4.0, 20, "Wan").unwrap().unwrap();
        assert_eq!((p.boundary_ratio, p.guidance_scale_2), (0.875, 3.0));
        let p = resolve_experts(Some(&A14B), f(Some(0.5), Some(2.0), None), 4.0, 20, "Wan").unwrap().unwrap();
        assert_eq!((p.boundary_ratio, p.guidance_scale_2), (0.5, 2.0));
        // No model default for the second scale: the request's guidance scale.
        let def = ExpertDefaults { guidance_scale_2: None, ..A14B };
        assert_eq!(
            resolve_experts(Some(&def), f(None, None, None), 4.5, 20, "Wan").unwrap().unwrap().guidance_scale_2,
            4.5
        );
    }

    #[test]
    fn bad_values_and_one_expert_models_name_the_field() {
        for (b, g, field) in [
            (Some(1.5), None, "diffusion.boundary_ratio"),
            (Some(f32::NAN), None, "diffusion.boundary_ratio"),
            (None, Some(-1.0), "diffusion.guidance_scale_2"),
            (None, Some(f32::INFINITY), "diffusion.guidance_scale_2"),
        ] {
            assert_eq!(resolve_experts(Some(&A14B), f(b, g, None), 4.0, 20, "Wan").unwrap_err().field, field);
        }
        let e = resolve_experts(None, f(Some(0.9), None, None), 4.0, 20, "Wan").unwrap_err();
        assert_eq!(e.field, "diffusion.boundary_ratio");
        assert!(e.rule.contains("one transformer"), "{}", e.rule);
        assert_eq!(
            resolve_experts(None, f(None, Some(3.0), None), 4.0, 20, "Wan").unwrap_err().field,
            "diffusion.guidance_scale_2"
        );
        assert_eq!(resolve_experts(None, f(None, None, None), 4.0, 20, "Wan").unwrap(), None);
    }
}
