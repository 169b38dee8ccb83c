//! Knobs against a schema: defaults, overrides, the rules between them, and the field each
//! refusal names. (The expert checks of before the schema, kept: Wan 2.2's knobs are the
//! example schema's.)

use serde_json::json;

use super::*;

fn a14b() -> KnobSchema {
    let mut s = KnobSchema::example();
    s.knobs[1].default = KnobDefault::Value(json!(3.0));
    s
}

fn core(guidance_scale: f32, steps: u32) -> Resolved {
    Resolved { guidance_scale, shift: 3.0, steps }
}

fn given(pairs: &[(&str, serde_json::Value)]) -> BTreeMap<String, serde_json::Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn one_expert() -> KnobSchema {
    let why = "applies to two-expert models (Wan 2.2 A14B); this Wan model has one transformer";
    let not_here = ["boundary_ratio", "guidance_scale_2", "switch_step"].map(|k| (k.to_string(), why.to_string()));
    KnobSchema { not_here: not_here.into_iter().collect(), ..KnobSchema::default() }
}

#[test]
fn a_switch_step_replaces_the_boundary_within_the_schedule() {
    let r = a14b().resolve(&given(&[("switch_step", json!(10))]), &core(4.0, 20), "Wan").unwrap();
    assert_eq!(r.values["switch_step"], json!(10));
    for (g, steps) in [
        (given(&[("switch_step", json!(21))]), 20),
        (given(&[("boundary_ratio", json!(0.9)), ("switch_step", json!(3))]), 20),
    ] {
        assert_eq!(a14b().resolve(&g, &core(4.0, steps), "Wan").err().unwrap().field, "diffusion.switch_step");
    }
    let e = one_expert().resolve(&given(&[("switch_step", json!(3))]), &core(4.0, 20), "Wan").err().unwrap();
    assert_eq!(e.field, "diffusion.switch_step");
}

#[test]
fn defaults_fill_and_requests_override() {
    let r = a14b().resolve(&given(&[]), &core(4.0, 20), "Wan").unwrap();
    assert_eq!((r.values["boundary_ratio"].as_f64(), r.values["guidance_scale_2"].as_f64()), (Some(0.875), Some(3.0)));
    assert!(!r.values.contains_key("switch_step"), "unset stays absent");
    let g = given(&[("boundary_ratio", json!(0.5)), ("guidance_scale_2", json!(2.0))]);
    let r = a14b().resolve(&g, &core(4.0, 20), "Wan").unwrap();
    assert_eq!((r.values["boundary_ratio"].as_f64(), r.values["guidance_scale_2"].as_f64()), (Some(0.5), Some(2.0)));
    // No model default for the second scale: the request's guidance scale.
    let r = KnobSchema::example().resolve(&given(&[]), &core(4.5, 20), "Wan").unwrap();
    assert_eq!(r.values["guidance_scale_2"].as_f64(), Some(4.5));
    // A null is no value: the default.
    let r = a14b().resolve(&given(&[("boundary_ratio", json!(null))]), &core(4.0, 20), "Wan").unwrap();
    assert_eq!(r.values["boundary_ratio"].as_f64(), Some(0.875));
}

#[test]
fn a_guidance_knob_above_one_runs_the_unconditional_branch() {
    let cfg = |g: f64| a14b().resolve(&given(&[("guidance_scale_2", json!(g))]), &core(1.0, 20), "Wan").unwrap().cfg;
    assert!(cfg(3.0));
    assert!(!cfg(1.0));
}

#[test]
fn bad_values_and_one_expert_models_name_the_field() {
    for (name, v, rule) in [
        ("boundary_ratio", json!(1.5), "1.5 must be in [0, 1]"),
        ("boundary_ratio", json!("high"), "\"high\" is not a number"),
        ("guidance_scale_2", json!(-1.0), "-1 is outside 0..=100"),
        ("switch_step", json!(2.5), "2.5 is not a step index (0, 1, ...)"),
        ("switch_step", json!(-1), "-1 is not a step index (0, 1, ...)"),
    ] {
        let e = a14b().resolve(&given(&[(name, v)]), &core(4.0, 20), "Wan").err().unwrap();
        assert_eq!((e.field.as_str(), e.rule.as_str()), (format!("diffusion.{name}").as_str(), rule));
    }
    let e = one_expert().resolve(&given(&[("boundary_ratio", json!(0.9))]), &core(4.0, 20), "Wan").err().unwrap();
    assert_eq!(e.field, "diffusion.boundary_ratio");
    assert!(e.rule.contains("one transformer"), "{}", e.rule);
    let e = one_expert().resolve(&given(&[("guidance_scale_2", json!(3.0))]), &core(4.0, 20), "Wan").err().unwrap();
    assert_eq!(e.field, "diffusion.guidance_scale_2");
    assert!(one_expert().resolve(&given(&[]), &core(4.0, 20), "Wan").unwrap().values.is_empty());
}

#[test]
fn an_unknown_knob_is_refused_naming_the_field_and_the_model_knobs() {
    let e = a14b().resolve(&given(&[("true_cfg_scale", json!(4.0))]), &core(4.0, 20), "Wan").err().unwrap();
    assert_eq!(e.field, "diffusion.true_cfg_scale");
    assert_eq!(
        e.rule,
        "not a parameter of this Wan model (this model's own parameters: boundary_ratio, guidance_scale_2, switch_step)"
    );
    let e = KnobSchema::default().resolve(&given(&[("stepz", json!(3))]), &core(4.0, 20), "Wan").err().unwrap();
    assert_eq!(
        (e.field.as_str(), e.rule.as_str()),
        ("diffusion.stepz", "not a parameter of this Wan model (this model's own parameters: none)")
    );
}

#[test]
fn f32_values_keep_their_short_decimal() {
    assert_eq!(number_f32(0.9).to_string(), "0.9");
    assert_eq!(number_f32(0.9).as_f64().map(|v| v as f32), Some(0.9f32));
    assert_eq!(number_f32(f32::NAN), serde_json::Value::Null);
}

#[test]
fn the_schema_serializes_with_its_knobs() {
    let v = serde_json::to_value(KnobSchema::example()).unwrap();
    assert_eq!(v["knobs"][0]["name"], "boundary_ratio");
    assert_eq!(v["knobs"][0]["kind"], json!({"type": "number", "min": 0.0, "max": 1.0}));
    assert_eq!(v["knobs"][0]["default"], json!({"value": 0.875}));
    assert_eq!(v["knobs"][1]["default"], json!({"same_as": "guidance_scale"}));
    assert_eq!(v["knobs"][2]["default"], json!("unset"));
    assert_eq!(v["exclusive"], json!([["boundary_ratio", "switch_step"]]));
    let back: KnobSchema = serde_json::from_value(v).unwrap();
    assert_eq!(back, KnobSchema::example());
    assert_eq!(serde_json::to_value(KnobSchema::default()).unwrap(), json!({}));
}
