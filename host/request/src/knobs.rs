//! A model's own request knobs (Wan 2.2's `boundary_ratio`, `guidance_scale_2`, `switch_step`;
//! next Qwen-Image's `true_cfg_scale` and the like), declared once by the family as a
//! [`KnobSchema`] instead of a field in every request struct of every crate. A request carries
//! the knobs it gives as `diffusion.<name>` (a name → JSON value map); [`KnobSchema::resolve`]
//! checks them against the model's schema, each error naming the field, and fills defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::RequestError;

/// The knobs a model takes, with their types, defaults and the rules between them. Served with
/// the model's limits (`GET /v1/capabilities`), so a client sees what each model takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KnobSchema {
    /// The knobs this model takes, in the order they are documented.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knobs: Vec<Knob>,
    /// Knobs of the family that this model does not take, each with why (Wan 2.1: the expert
    /// knobs, "applies to two-expert models"), so the refusal says more than "unknown".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_here: BTreeMap<String, String>,
    /// Pairs of knobs a request may not both give (Wan 2.2: `boundary_ratio`, `switch_step`:
    /// two ways of saying where the experts switch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusive: Vec<[String; 2]>,
    /// Whether an adapter may bind to one expert (`lora[i].expert`): two-expert models.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expert_adapters: bool,
    /// Whether an adapter may bind to one loop of a two-stage recipe (`lora[i].expert`: `base`
    /// or `refine`): LTX-2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stage_adapters: bool,
}

/// One knob: its wire name (`diffusion.<name>`, and the same name flat where a wire has flat
/// fields), what values it takes, and its value when a request leaves it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knob {
    /// The wire name, e.g. `boundary_ratio`.
    pub name: String,
    /// What values it takes.
    pub kind: KnobKind,
    /// Its value when a request leaves it out.
    pub default: KnobDefault,
    /// One line for clients (served with the schema).
    pub doc: String,
}

/// The values a knob takes; each is checked by `resolve`, naming the field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KnobKind {
    /// A finite number in `[min, max]`.
    Number {
        /// The smallest value taken.
        min: f64,
        /// The largest value taken.
        max: f64,
    },
    /// A classifier-free guidance scale of its own, in `0..=100` (as `guidance_scale`): above
    /// 1 the unconditional branch runs (see [`ResolvedRequest::does_cfg`](crate::ResolvedRequest::does_cfg)).
    GuidanceScale,
    /// A step index, at most the request's steps.
    Step,
}

/// A knob's value when a request leaves it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobDefault {
    /// None: the knob stays absent from the resolved values (the model reads that as "not
    /// asked for", as Wan 2.2 reads a missing `switch_step`: route by the boundary instead).
    Unset,
    /// This value.
    Value(serde_json::Value),
    /// The request's resolved value of this other parameter (`guidance_scale`, `shift`,
    /// `num_inference_steps`, or another knob resolved before it).
    SameAs(String),
}

/// The parameters a [`KnobDefault::SameAs`] may name, as resolved before the knobs.
pub(crate) struct Resolved {
    /// `guidance_scale`.
    pub guidance_scale: f32,
    /// `shift`.
    pub shift: f32,
    /// `num_inference_steps`.
    pub steps: u32,
}

/// A request's knobs, checked against a schema: their concrete values, and whether one that is
/// a guidance scale runs the unconditional branch.
pub(crate) struct ResolvedKnobs {
    /// Name → value, for every knob given or with a default.
    pub values: BTreeMap<String, serde_json::Value>,
    /// A [`KnobKind::GuidanceScale`] knob is above 1.
    pub cfg: bool,
}

impl KnobSchema {
    /// Wan 2.2 A14B-like expert knobs (boundary 0.875, the second guidance scale that of the
    /// first, `switch_step` exclusive with the boundary) for tests and examples; the real ones
    /// are the Wan family's.
    pub fn example() -> Self {
        let knob = |name: &str, kind, default, doc: &str| Knob { name: name.into(), kind, default, doc: doc.into() };
        KnobSchema {
            knobs: vec![
                knob(
                    "boundary_ratio",
                    KnobKind::Number { min: 0.0, max: 1.0 },
                    KnobDefault::Value(number_f32(0.875)),
                    "the high-noise expert while the timestep is at or above this × 1000",
                ),
                knob(
                    "guidance_scale_2",
                    KnobKind::GuidanceScale,
                    KnobDefault::SameAs("guidance_scale".into()),
                    "the low-noise expert's guidance scale",
                ),
                knob("switch_step", KnobKind::Step, KnobDefault::Unset, "the low-noise expert from this step on"),
            ],
            not_here: BTreeMap::new(),
            exclusive: vec![["boundary_ratio".into(), "switch_step".into()]],
            expert_adapters: true,
            stage_adapters: false,
        }
    }

    /// Whether the model takes no knobs and states nothing about them (then nothing is served).
    pub fn is_empty(&self) -> bool {
        *self == KnobSchema::default()
    }

    /// The knob called `name`, if this model takes it.
    pub fn knob(&self, name: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.name == name)
    }

    /// This schema with the defaults of `given` (a model folder's own, `fastvideo.json`'s
    /// `knobs`): each must be one of its knobs and a value its kind takes; a step knob is checked
    /// against no step count (the request's is not known yet).
    pub fn with_defaults(mut self, given: &BTreeMap<String, serde_json::Value>) -> Result<Self, String> {
        for (name, value) in given {
            let names = self.names();
            let Some(knob) = self.knobs.iter_mut().find(|k| &k.name == name) else {
                return Err(format!("knob `{name}` is not one of this model's ({names})"));
            };
            let v = knob.kind.check(value, u32::MAX).map_err(|rule| format!("knob `{name}`: {rule}"))?;
            knob.default = KnobDefault::Value(match knob.kind {
                KnobKind::Step => serde_json::Value::from(v as u64),
                _ => number(v),
            });
        }
        Ok(self)
    }

    /// The knob names, for messages: `a, b, c` or `none`.
    fn names(&self) -> String {
        match self.knobs.is_empty() {
            true => "none".into(),
            false => self.knobs.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", "),
        }
    }

    /// The request's knobs `given` against this schema: unknown ones refused (naming
    /// `diffusion.<name>` and the knobs this model takes), values type- and range-checked,
    /// exclusive pairs refused, defaults filled.
    pub(crate) fn resolve(
        &self,
        given: &BTreeMap<String, serde_json::Value>,
        core: &Resolved,
        family: &str,
    ) -> Result<ResolvedKnobs, RequestError> {
        let given: BTreeMap<&str, &serde_json::Value> =
            given.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.as_str(), v)).collect();
        for &name in given.keys() {
            if self.knob(name).is_none() {
                let why = match self.not_here.get(name) {
                    Some(why) => why.clone(),
                    None => format!("not a parameter of this {family} model"),
                };
                return Err(RequestError::new(
                    format!("diffusion.{name}"),
                    format!("{why} (this model's own parameters: {})", self.names()),
                ));
            }
        }
        for [a, b] in &self.exclusive {
            if given.contains_key(a.as_str()) && given.contains_key(b.as_str()) {
                return Err(RequestError::new(format!("diffusion.{b}"), format!("give {a} or {b}, not both")));
            }
        }
        let mut values = BTreeMap::new();
        let mut cfg = false;
        for knob in &self.knobs {
            let value = match (given.get(knob.name.as_str()), &knob.default) {
                (Some(v), _) => serde_json::Value::clone(v),
                (None, KnobDefault::Unset) => continue,
                (None, KnobDefault::Value(v)) => v.clone(),
                (None, KnobDefault::SameAs(other)) => match other.as_str() {
                    "guidance_scale" => number_f32(core.guidance_scale),
                    "shift" => number_f32(core.shift),
                    "num_inference_steps" => core.steps.into(),
                    knob => match values.get(knob) {
                        Some(v) => serde_json::Value::clone(v),
                        None => continue,
                    },
                },
            };
            let field = format!("diffusion.{}", knob.name);
            let checked = knob.kind.check(&value, core.steps).map_err(|rule| RequestError::new(&field, rule))?;
            cfg |= knob.kind == KnobKind::GuidanceScale && checked > 1.0;
            // One spelling per value (`3` and `3.0` are one guidance scale), so requests that
            // differ only in how a number was written resolve equal.
            let value = match knob.kind {
                KnobKind::Step => serde_json::Value::from(checked as u64),
                _ => number(checked),
            };
            values.insert(knob.name.clone(), value);
        }
        Ok(ResolvedKnobs { values, cfg })
    }
}

impl KnobKind {
    /// `value` as this kind takes it (as a number), or what is wrong with it.
    fn check(&self, value: &serde_json::Value, steps: u32) -> Result<f64, String> {
        match self {
            KnobKind::Number { min, max } => {
                let v = value.as_f64().ok_or_else(|| format!("{value} is not a number"))?;
                match v.is_finite() && (*min..=*max).contains(&v) {
                    true => Ok(v),
                    false => Err(format!("{v} must be in [{min}, {max}]")),
                }
            }
            KnobKind::GuidanceScale => {
                let v = value.as_f64().ok_or_else(|| format!("{value} is not a number"))?;
                match v.is_finite() && (0.0..=100.0).contains(&v) {
                    true => Ok(v),
                    false => Err(format!("{v} is outside 0..=100")),
                }
            }
            KnobKind::Step => {
                let s = value.as_u64().ok_or_else(|| format!("{value} is not a step index (0, 1, ...)"))?;
                match s <= u64::from(steps) {
                    true => Ok(s as f64),
                    false => Err(format!("{s} is past the request's {steps} steps")),
                }
            }
        }
    }
}

/// A number as a knob value; `f32`s go through their shortest decimal form, so `0.9f32` is
/// `0.9` on the wire (and reads back as the same `f32`), not `0.8999999761581421`.
pub fn number(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// `v` as a knob value, through its shortest decimal form (see [`number`]).
pub fn number_f32(v: f32) -> serde_json::Value {
    number(v.to_string().parse().unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests;
