//! Which adapters may bind to one expert or one loop (`lora[i].expert`): the model's knob schema
//! says whether it has two experts (`high_noise`, `low_noise`) or a two-stage recipe (`base`,
//! `refine`); a binding it does not have is refused naming the entry.

use crate::knobs::KnobSchema;
use crate::{LoraChoice, RequestError};

/// `lora`'s bindings against what a `family` model with `knobs` takes.
pub(super) fn check(lora: &[LoraChoice], knobs: &KnobSchema, family: &str) -> Result<(), RequestError> {
    for (i, e) in lora.iter().enumerate().filter_map(|(i, l)| l.expert.map(|e| (i, e))) {
        let (allowed, what) = match e.is_stage() {
            true => (knobs.stage_adapters, "a loop of a two-stage recipe (`base`, `refine`)"),
            false => (knobs.expert_adapters, "an expert of a two-expert model (`high_noise`, `low_noise`)"),
        };
        if !allowed {
            let have = match (knobs.expert_adapters, knobs.stage_adapters) {
                (true, _) => "binds to `high_noise` or `low_noise` here",
                (_, true) => "binds to `base` or `refine` here",
                _ => "has one transformer and one loop",
            };
            return Err(RequestError::new(
                format!("lora[{i}].expert"),
                format!("`{}` binds to {what}; this {family} model {have}", e.as_str()),
            ));
        }
    }
    Ok(())
}
