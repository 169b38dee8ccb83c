//! Wan 2.2 A14B's two experts as the family declares them: the request knobs that steer them
//! (`boundary_ratio`, `guidance_scale_2`, `switch_step`, a [`KnobSchema`] the request plane
//! checks), their typed reading ([`ExpertKnobs`]), and the rule that routes each step
//! ([`BoundaryRouting`], diffusers' `WanPipeline`). A one-expert Wan model declares none of the
//! knobs but says why each is refused.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use fastvideo_pipeline::{ExpertRouting, ExpertRoutingState, PluginMeter, Route, StepCtx};
use fastvideo_request::{number_f32, Knob, KnobDefault, KnobKind, KnobSchema, ResolvedRequest};

/// The knob: where the low-noise expert takes over, as a fraction of the training timesteps.
pub const BOUNDARY_RATIO: &str = "boundary_ratio";
/// The knob: the low-noise expert's guidance scale.
pub const GUIDANCE_SCALE_2: &str = "guidance_scale_2";
/// The knob: the low-noise expert from this step on, instead of the boundary.
pub const SWITCH_STEP: &str = "switch_step";

/// A Wan model's knobs. `two_experts`: a two-expert model's boundary (`model_index.json`'s
/// `boundary_ratio`) and the low-noise expert's guidance scale from the folder's run defaults
/// (absent: the request's `guidance_scale`, as diffusers does); `None` for one transformer.
pub fn knob_schema(two_experts: Option<(f32, Option<f32>)>) -> KnobSchema {
    let Some((boundary_ratio, guidance_scale_2)) = two_experts else {
        let why = "applies to two-expert models (Wan 2.2 A14B); this Wan model has one transformer";
        let not_here = [BOUNDARY_RATIO, GUIDANCE_SCALE_2, SWITCH_STEP].map(|k| (k.to_string(), why.to_string()));
        return KnobSchema { not_here: BTreeMap::from(not_here), ..KnobSchema::default() };
    };
    let knob = |name: &str, kind, default, doc: &str| Knob { name: name.into(), kind, default, doc: doc.into() };
    KnobSchema {
        knobs: vec![
            knob(
                BOUNDARY_RATIO,
                KnobKind::Number { min: 0.0, max: 1.0 },
                KnobDefault::Value(number_f32(boundary_ratio)),
                "The high-noise expert runs while the timestep is at or above boundary_ratio × 1000 \
                 (0: it runs throughout; 1: the low-noise one from the first step below 1000).",
            ),
            knob(
                GUIDANCE_SCALE_2,
                KnobKind::GuidanceScale,
                match guidance_scale_2 {
                    Some(g) => KnobDefault::Value(number_f32(g)),
                    None => KnobDefault::SameAs("guidance_scale".into()),
                },
                "The low-noise expert's guidance scale.",
            ),
            knob(
                SWITCH_STEP,
                KnobKind::Step,
                KnobDefault::Unset,
                "The low-noise expert from this step (0-based) on, instead of boundary_ratio \
                 (how ComfyUI's chained samplers split a schedule).",
            ),
        ],
        not_here: BTreeMap::new(),
        exclusive: vec![[BOUNDARY_RATIO.into(), SWITCH_STEP.into()]],
        expert_adapters: true,
        stage_adapters: false,
    }
}

/// A resolved request's expert knobs, typed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertKnobs {
    /// In `[0, 1]`.
    pub boundary_ratio: f32,
    /// In `0..=100`.
    pub guidance_scale_2: f32,
    /// At most the request's steps, if given.
    pub switch_step: Option<u32>,
}

impl ExpertKnobs {
    /// `req`'s expert knobs; `None` unless it was resolved against a two-expert model (whose
    /// schema gives both numbers a value).
    pub fn of(req: &ResolvedRequest) -> Option<Self> {
        Some(ExpertKnobs {
            boundary_ratio: req.knob_f64(BOUNDARY_RATIO)? as f32,
            guidance_scale_2: req.knob_f64(GUIDANCE_SCALE_2)? as f32,
            switch_step: req.knob_u32(SWITCH_STEP),
        })
    }
}

/// Wan 2.2's rule (diffusers' `WanPipeline`): the high-noise expert while the step's timestep is
/// at or above `boundary_ratio × num_train_timesteps`, then the low-noise expert with
/// `guidance_scale_2`. Both come from the request's knobs (its own or the model's defaults). A
/// request's `switch_step` replaces the timestep test with a step index (ComfyUI's chained
/// samplers).
pub struct BoundaryRouting {
    /// The scheduler's training timesteps (1000 for Wan).
    pub num_train_timesteps: f32,
}

struct BoundaryState {
    boundary: f32,
    switch_step: Option<u32>,
    guidance_scale: f32,
    guidance_scale_2: f32,
}

impl ExpertRouting for BoundaryRouting {
    fn init(&self, req: &ResolvedRequest, _experts: u32, _meter: &PluginMeter) -> Result<Box<dyn ExpertRoutingState>> {
        let e = ExpertKnobs::of(req)
            .context("expert routing: the request has no expert parameters (is this a two-expert model?)")?;
        Ok(Box::new(BoundaryState {
            boundary: e.boundary_ratio * self.num_train_timesteps,
            switch_step: e.switch_step,
            guidance_scale: req.guidance_scale,
            guidance_scale_2: e.guidance_scale_2,
        }))
    }
}

impl ExpertRoutingState for BoundaryState {
    fn route(&mut self, step: &StepCtx) -> Result<Route> {
        let high = match self.switch_step {
            Some(s) => step.step_index < s,
            None => step.timestep >= self.boundary,
        };
        Ok(if high {
            Route { expert: 0, guidance_scale: self.guidance_scale }
        } else {
            Route { expert: 1, guidance_scale: self.guidance_scale_2 }
        })
    }
}

#[cfg(test)]
mod tests {
    use fastvideo_request::{ModelLimits, OmniRequest};

    use super::*;

    fn limits(two_experts: Option<(f32, Option<f32>)>) -> ModelLimits {
        let mut l = ModelLimits::example();
        l.defaults.knobs = knob_schema(two_experts);
        l
    }

    #[test]
    fn a_two_expert_model_reads_its_knobs_typed_with_the_folder_defaults() {
        let mut r = OmniRequest::text_to_video("e", "a red circle");
        let e = ExpertKnobs::of(&r.resolve(&limits(Some((0.9, Some(3.0)))), || 0).unwrap()).unwrap();
        assert_eq!(e, ExpertKnobs { boundary_ratio: 0.9, guidance_scale_2: 3.0, switch_step: None });
        // No second scale in the folder: the request's guidance scale (the example's 4).
        r.diffusion.set_knob(SWITCH_STEP, Some(7));
        let e = ExpertKnobs::of(&r.resolve(&limits(Some((0.875, None))), || 0).unwrap()).unwrap();
        assert_eq!(e, ExpertKnobs { boundary_ratio: 0.875, guidance_scale_2: 4.0, switch_step: Some(7) });
    }

    #[test]
    fn a_one_expert_model_refuses_the_knobs_saying_why() {
        let mut r = OmniRequest::text_to_video("e", "a red circle");
        assert_eq!(ExpertKnobs::of(&r.resolve(&limits(None), || 0).unwrap()), None);
        r.diffusion.set_knob(BOUNDARY_RATIO, Some(0.5));
        let e = r.resolve(&limits(None), || 0).unwrap_err();
        assert_eq!(e.field, "diffusion.boundary_ratio");
        assert!(e.rule.starts_with("applies to two-expert models (Wan 2.2 A14B); this Wan model has one transformer"));
    }
}
