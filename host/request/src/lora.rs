//! The `lora` field: which adapters a request runs with, and how strongly. `resolve` checks what
//! it can alone (names present, strengths finite and within bounds, no name twice); which names
//! exist, and how many a request may name, is the serving side's (the adapter cache's) check.

use serde::{Deserialize, Serialize};

use crate::RequestError;

/// Strengths beyond this are refused: far outside what any adapter is trained for, and a
/// typo (`80` for `0.8`) more likely than intent.
pub const MAX_LORA_SCALE: f64 = 10.0;

/// One adapter a request names: `{"name": "...", "scale": 0.8}`; `scale` defaults to the one
/// the deploy gives the adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraChoice {
    /// The adapter's name in the deploy (`[[adapters]] name`).
    pub name: String,
    /// Strength, in ±[`MAX_LORA_SCALE`]; absent: the deploy's `default_scale`. A number, or
    /// text that reads as one (forms carry numbers as text), through [`parse_lora_scale`].
    #[serde(default, deserialize_with = "scale_field", skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Two-expert models: the one expert the adapter binds to (`high_noise` or `low_noise`,
    /// as the Wan 2.2 LoRAs that ship one file per expert); two-stage models (LTX-2's
    /// two-stage recipe): the one loop (`base` or `refine`, as the distilled LoRA the reference
    /// swaps in for stage two); absent: both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert: Option<LoraExpert>,
}

/// Which expert of a two-expert model, or which loop of a two-stage one, an adapter binds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraExpert {
    /// Expert 0, the model's `transformer`.
    HighNoise,
    /// Expert 1, `transformer_2`.
    LowNoise,
    /// A two-stage model's first loop (`denoise`).
    Base,
    /// A two-stage model's second loop (`refine`).
    Refine,
}

impl LoraExpert {
    /// The expert's (or loop's) index in the model.
    pub fn index(self) -> u32 {
        match self {
            LoraExpert::HighNoise | LoraExpert::Base => 0,
            LoraExpert::LowNoise | LoraExpert::Refine => 1,
        }
    }

    /// Whether it names a loop of a two-stage model rather than an expert.
    pub fn is_stage(self) -> bool {
        matches!(self, LoraExpert::Base | LoraExpert::Refine)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LoraExpert::HighNoise => "high_noise",
            LoraExpert::LowNoise => "low_noise",
            LoraExpert::Base => "base",
            LoraExpert::Refine => "refine",
        }
    }
}

/// An adapter as a resolved request runs it: its name and strength (`None`: the deploy's
/// default, filled in by the adapter cache).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraUse {
    /// The adapter's name, trimmed.
    pub name: String,
    /// The requested strength, if given.
    pub scale: Option<f64>,
    /// The expert it binds to, if one (two-expert models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert: Option<LoraExpert>,
}

/// A scale written as text (a form field, or a JSON string): the number it reads as, which
/// must be finite. `NaN` and `inf` parse as floats but are no strength; refusing them here
/// keeps them from turning into JSON `null` (the deploy's default) on the way in.
pub fn parse_lora_scale(text: &str) -> Result<f64, String> {
    let t = text.trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("`{t}` is not a finite number")),
        Err(_) => Err(format!("`{t}` is not a number")),
    }
}

/// `scale` as JSON or a form sends it: a number, text through [`parse_lora_scale`], or null.
fn scale_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct Scale;
    impl<'de> serde::de::Visitor<'de> for Scale {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a finite number (or text that reads as one)")
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse_lora_scale(v).map(Some).map_err(E::custom)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Scale)
        }
    }
    d.deserialize_option(Scale)
}

/// Checks each choice on its own: a name, a finite strength within ±[`MAX_LORA_SCALE`], and
/// no adapter named twice. Errors name `lora[i].name` or `lora[i].scale`.
pub fn resolve_lora(choices: &[LoraChoice]) -> Result<Vec<LoraUse>, RequestError> {
    let mut out: Vec<LoraUse> = Vec::with_capacity(choices.len());
    for (i, c) in choices.iter().enumerate() {
        let name = c.name.trim();
        if name.is_empty() {
            return Err(RequestError::new(format!("lora[{i}].name"), "must not be empty"));
        }
        if out.iter().any(|u| u.name == name) {
            return Err(RequestError::new(format!("lora[{i}].name"), format!("`{name}` is named twice")));
        }
        if let Some(s) = c.scale {
            if !s.is_finite() || s.abs() > MAX_LORA_SCALE {
                return Err(RequestError::new(
                    format!("lora[{i}].scale"),
                    format!("{s} must be a finite number in [-{MAX_LORA_SCALE}, {MAX_LORA_SCALE}]"),
                ));
            }
        }
        out.push(LoraUse { name: name.to_string(), scale: c.scale, expert: c.expert });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(name: &str, scale: Option<f64>) -> LoraChoice {
        LoraChoice { name: name.into(), scale, expert: None }
    }

    #[test]
    fn names_and_strengths_are_checked_one_by_one() {
        let ok = resolve_lora(&[choice("a", Some(0.8)), choice(" b ", None)]).unwrap();
        assert_eq!(
            ok,
            vec![
                LoraUse { name: "a".into(), scale: Some(0.8), expert: None },
                LoraUse { name: "b".into(), scale: None, expert: None }
            ]
        );
        for (choices, field) in [
            (vec![choice("", None)], "lora[0].name"),
            (vec![choice("a", None), choice("a", Some(1.0))], "lora[1].name"),
            (vec![choice("a", Some(f64::NAN))], "lora[0].scale"),
            (vec![choice("a", Some(0.5)), choice("b", Some(-10.5))], "lora[1].scale"),
        ] {
            assert_eq!(resolve_lora(&choices).unwrap_err().field, field);
        }
        assert!(resolve_lora(&[choice("a", Some(-10.0))]).is_ok());
        // Scales as text (forms) read as numbers; non-finite ones are refused, not defaulted.
        let text = serde_json::from_str::<LoraChoice>(r#"{"name": "a", "scale": " 0.5 "}"#).unwrap();
        assert_eq!(text.scale, Some(0.5));
        for bad in ["NaN", "nan", "inf", "-Infinity", "x"] {
            let e = serde_json::from_value::<LoraChoice>(serde_json::json!({"name": "a", "scale": bad})).unwrap_err();
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
        assert_eq!(serde_json::from_str::<LoraChoice>(r#"{"name": "a", "scale": null}"#).unwrap().scale, None);
        // JSON: an unknown key is refused, a missing scale is fine.
        assert!(serde_json::from_str::<LoraChoice>(r#"{"name": "a", "strength": 1}"#).is_err());
        assert_eq!(serde_json::from_str::<LoraChoice>(r#"{"name": "a"}"#).unwrap(), choice("a", None));
    }
}
