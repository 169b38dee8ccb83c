//! A model's sound: what it declares in its limits and how a request's `generate_sound` resolves
//! against it.

use serde::{Deserialize, Serialize};

use crate::{RequestError, TaskType};

/// The sound a model makes (Cosmos3: 48 kHz stereo from its audio tokenizer). A model with this
/// in its limits makes sound by default; one without refuses `outputs.generate_sound: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioLimits {
    /// Samples per second per channel of the waveform the model makes.
    pub sample_rate: u32,
    /// Channels of that waveform (2: stereo).
    pub channels: u16,
}

/// Whether the request makes sound: `generate_sound` as given, else whether the model makes
/// any (a still picture, `t2i`, never has sound; the action tasks make none unless asked, as the
/// reference pipeline's action mode runs without it). Asking a model without sound, or a picture,
/// for it is refused naming the field, so a client learns at once instead of getting silence.
pub(super) fn resolve_sound(
    given: Option<bool>,
    audio: Option<&AudioLimits>,
    task: TaskType,
    family: &str,
) -> Result<bool, RequestError> {
    let field = "outputs.generate_sound";
    match (given, audio) {
        (Some(true), None) => Err(RequestError::new(field, format!("this {family} model makes no sound"))),
        (Some(true), Some(_)) if task == TaskType::T2i => {
            Err(RequestError::new(field, "`t2i` makes a still picture, without sound"))
        }
        (Some(on), _) => Ok(on),
        (None, audio) => Ok(audio.is_some() && task != TaskType::T2i && !crate::is_action_task(task)),
    }
}

#[cfg(test)]
mod tests {
    use crate::{AudioLimits, ModelLimits, OmniRequest};

    fn with_sound() -> ModelLimits {
        ModelLimits {
            family: "Cosmos3".into(),
            audio: Some(AudioLimits { sample_rate: 48_000, channels: 2 }),
            action: None,
            ..ModelLimits::example()
        }
    }

    fn req(generate_sound: Option<bool>) -> OmniRequest {
        let mut r = OmniRequest::text_to_video("r1", "a bell rings");
        r.outputs.generate_sound = generate_sound;
        r
    }

    #[test]
    fn sound_defaults_to_what_the_model_makes() {
        assert!(req(None).resolve(&with_sound(), || 1).unwrap().generate_sound);
        assert!(!req(None).resolve(&ModelLimits::example(), || 1).unwrap().generate_sound);
        assert!(!req(Some(false)).resolve(&with_sound(), || 1).unwrap().generate_sound);
        assert!(!req(Some(false)).resolve(&ModelLimits::example(), || 1).unwrap().generate_sound);
        assert!(req(Some(true)).resolve(&with_sound(), || 1).unwrap().generate_sound);
        // A still picture has no sound, by default or on request.
        let mut picture = req(None);
        picture.task = crate::TaskType::T2i;
        assert!(!picture.resolve(&with_sound(), || 1).unwrap().generate_sound);
        picture.outputs.generate_sound = Some(true);
        assert_eq!(picture.resolve(&with_sound(), || 1).unwrap_err().field, "outputs.generate_sound");
    }

    #[test]
    fn sound_on_a_silent_model_is_refused_naming_the_field() {
        let e = req(Some(true)).resolve(&ModelLimits::example(), || 1).unwrap_err();
        assert_eq!(e.field, "outputs.generate_sound");
        assert!(e.to_string().contains("makes no sound"), "{e}");
    }

    #[test]
    fn limits_wire_is_unchanged_without_sound_and_names_it_with() {
        let silent = serde_json::to_value(ModelLimits::example()).unwrap();
        assert!(silent.get("audio").is_none(), "{silent}");
        let back: ModelLimits = serde_json::from_value(silent).unwrap();
        assert_eq!(back, ModelLimits::example());
        let loud = serde_json::to_value(with_sound()).unwrap();
        assert_eq!(loud["audio"], serde_json::json!({"sample_rate": 48000, "channels": 2}));
        assert_eq!(serde_json::from_value::<ModelLimits>(loud).unwrap(), with_sound());
        // The request's field stays off the wire unless set.
        assert!(serde_json::to_value(req(None)).unwrap()["outputs"].get("generate_sound").is_none());
    }
}
