//! Reading `/v1/videos` and `/v1/images` parameters: fields map to the request, bad values
//! name their field, form fields nest.

use super::*;

fn limits() -> ModelLimits {
    ModelLimits {
        video: Some(fastvideo_request::VideoLimits { frame_multiple: 4, max_frames: 81 }),
        picture: Some(fastvideo_request::PictureLimits { spatial_multiple: 16, max_side: 512 }),
        audio: None,
        action: None,
        ..ModelLimits::example()
    }
}

#[test]
fn openai_fields_map_to_the_request() {
    let p = CreateParams {
        prompt: Some("a red circle".into()),
        seconds: Some(SecondsValue::Text("2".into())),
        size: Some("96x64".into()),
        ..Default::default()
    };
    let r = p.to_request("v1".into(), TaskType::T2v, "m", &limits()).unwrap();
    assert_eq!((r.diffusion.width, r.diffusion.height), (Some(96), Some(64)));
    assert_eq!(r.diffusion.num_frames, Some(17), "2 s at 8 fps is 16 frames, nearest 4k+1 is 17");
    let img = p.to_request("i1".into(), TaskType::T2i, "m", &limits()).unwrap();
    assert_eq!(img.diffusion.num_frames, Some(1));
    // Two-expert fields pass through to the request, which resolve checks against the model.
    let p = CreateParams { boundary_ratio: Some(0.9), guidance_scale_2: Some(3.0), ..p };
    let r = p.to_request("v2".into(), TaskType::T2v, "m", &limits()).unwrap();
    let knobs = serde_json::json!({"boundary_ratio": 0.9, "guidance_scale_2": 3.0});
    assert_eq!(serde_json::to_value(&r.diffusion.knobs).unwrap(), knobs);
    assert_eq!(r.resolve(&limits(), || 0).unwrap_err().field, "diffusion.boundary_ratio");
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        (CreateParams { prompt: None, ..Default::default() }, "prompt"),
        (CreateParams { prompt: Some("p".into()), size: Some("big".into()), ..Default::default() }, "size"),
        (CreateParams { prompt: Some("p".into()), model: Some("sora-2".into()), ..Default::default() }, "model"),
        (
            CreateParams {
                prompt: Some("p".into()),
                seconds: Some(SecondsValue::Text("x".into())),
                ..Default::default()
            },
            "seconds",
        ),
    ];
    for (p, field) in cases {
        match p.to_request("x".into(), TaskType::T2v, "m", &limits()) {
            Err(ApiError::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some(field)),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn the_sampler_is_chosen_by_name_and_a_wrong_one_is_named() {
    let p: CreateParams = serde_json::from_value(serde_json::json!({"prompt": "p", "sampler": "euler"})).unwrap();
    let r = p.to_request("x".into(), TaskType::T2v, "m", &limits()).unwrap();
    assert_eq!(r.sampling.sampler, Some(SamplerKind::Euler));
    let bad = serde_path_to_error::deserialize::<_, CreateParams>(serde_json::json!({"prompt": "p", "sampler": "rk4"}));
    let e = bad.unwrap_err();
    assert_eq!(e.path().to_string(), "sampler");
    assert!(e.into_inner().to_string().contains("euler"));
}

#[test]
fn form_fields_keep_text_fields_as_text() {
    assert_eq!(form_value("prompt", "42".into()), serde_json::json!("42"));
    assert_eq!(form_value("seed", "42".into()), serde_json::json!(42));
    assert_eq!(form_value("plugin_params", r#"{"a":{"b":1}}"#.into()), serde_json::json!({"a": {"b": 1}}));
}

#[test]
fn bracketed_form_names_nest() {
    let mut m = serde_json::Map::new();
    for (k, v) in [("lora[][name]", "a"), ("lora[][scale]", "0.8"), ("lora[][name]", "b")] {
        insert_form_field(&mut m, k, v.into()).unwrap();
    }
    assert_eq!(m.remove("lora").unwrap(), serde_json::json!([{"name": "a", "scale": "0.8"}, {"name": "b"}]));
    insert_form_field(&mut m, "plugin_params[apg][eta]", serde_json::json!(0.5)).unwrap();
    insert_form_field(&mut m, "plugin_params[apg][norm]", serde_json::json!(2)).unwrap();
    insert_form_field(&mut m, "seed", serde_json::json!(3)).unwrap();
    assert_eq!(
        serde_json::Value::Object(m),
        serde_json::json!({"plugin_params": {"apg": {"eta": 0.5, "norm": 2}}, "seed": 3})
    );
}

#[test]
fn deeply_nested_form_names_are_refused_not_built() {
    let mut m = serde_json::Map::new();
    let deep = format!("a{}", "[x]".repeat(100_000));
    let e = insert_form_field(&mut m, &deep, serde_json::json!(1)).unwrap_err();
    assert!(format!("{e:?}").contains("deeper than 8"), "{e:?}");
    assert!(m.is_empty());
    insert_form_field(&mut m, &format!("a{}", "[x]".repeat(8)), serde_json::json!(1)).unwrap();
}

#[test]
fn huge_seconds_are_an_error_naming_the_field() {
    let l = limits();
    for secs in [1e6, 1e300] {
        let e = frames_for_seconds(&SecondsValue::Number(secs), 16, &l).unwrap_err();
        assert!(format!("{e:?}").contains("at most"), "{e:?}");
    }
    assert_eq!(frames_for_seconds(&SecondsValue::Number(1.0), 16, &l).unwrap(), 17);
}

#[test]
fn unknown_fields_are_named() {
    assert_eq!(unknown_field("unknown field `stepz`, expected one of ...").as_deref(), Some("stepz"));
}

#[test]
fn generate_sound_is_refused_on_a_silent_model_and_passed_on_to_one_with_sound() {
    let json = serde_json::json!({"prompt": "p", "generate_sound": true});
    let e = video_request_from_json(json.to_string().as_bytes(), &limits()).unwrap_err();
    match e {
        ApiError::BadRequest { param, message, .. } => {
            assert_eq!(param.as_deref(), Some("generate_sound"));
            assert!(message.contains("makes no sound"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A form sends it as text; it reads as the same boolean.
    let e = video_request_from_form(&[("prompt", "p"), ("generate_sound", "true")], &limits()).unwrap_err();
    assert!(matches!(e, ApiError::BadRequest { param: Some(ref p), .. } if p == "generate_sound"), "{e:?}");
    // `false` asks for nothing a silent model lacks.
    let r = video_request_from_form(&[("prompt", "p"), ("generate_sound", "false")], &limits()).unwrap();
    assert_eq!(r.outputs.generate_sound, Some(false));
    let sound =
        ModelLimits { audio: Some(fastvideo_request::AudioLimits { sample_rate: 48_000, channels: 2 }), ..limits() };
    let r = video_request_from_json(json.to_string().as_bytes(), &sound).unwrap();
    assert!(r.resolve(&sound, || 0).unwrap().generate_sound);
    let p: CreateParams = serde_json::from_value(json).unwrap();
    let e = p.to_request("i".into(), TaskType::T2i, "model", &sound).unwrap_err();
    assert!(matches!(e, ApiError::BadRequest { param: Some(ref p), .. } if p == "generate_sound"), "{e:?}");
}

/// The few-step fields reach the request as they are; the request's resolution names a bad list.
#[test]
fn a_schedule_and_sigma_max_reach_the_request() {
    let p: CreateParams = serde_json::from_value(
        serde_json::json!({"prompt": "p", "timesteps": [1000, 750], "sampler": "rcm", "sigma_max": 200.0}),
    )
    .unwrap();
    let r = p.to_request("x".into(), TaskType::T2v, "m", &limits()).unwrap();
    assert_eq!(r.diffusion.timesteps, Some(vec![1000.0, 750.0]));
    assert_eq!((r.sampling.sampler, r.sampling.sigma_max), (Some(SamplerKind::Rcm), Some(200.0)));
}
