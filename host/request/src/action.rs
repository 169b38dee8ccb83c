//! `ActionPart`: one action for a live world-model session — a discrete key, a continuous delta
//! (a mouse move), or both — and the video frame it applies from.

use serde::{Deserialize, Serialize};

use crate::RequestError;

/// One action sent to a live world-model session: a `key`, a `delta`, or both, plus the frame it
/// applies from. Unknown fields are refused; [`check`](Self::check) validates it against a model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionPart {
    /// A key the model knows (its `actions`), e.g. `"left"`. (`action` is accepted too.)
    #[serde(alias = "action")]
    pub key: Option<String>,
    /// A continuous control, `[dx, dy]`, for models that take one.
    pub delta: Option<[f32; 2]>,
    /// The video frame it applies from: the first chunk that starts at or after this frame. When
    /// absent, the first chunk not yet committed.
    pub from_frame: Option<u64>,
    /// The caller's id for it, echoed with the frames generated under it.
    pub id: Option<u64>,
}

impl ActionPart {
    /// A key alone, applying as soon as it can.
    pub fn key(key: &str, id: u64) -> Self {
        Self { key: Some(key.to_string()), id: Some(id), ..Default::default() }
    }

    /// Checks it against what a model takes (`keys`; continuous deltas or not); errors name the
    /// field.
    pub fn check(&self, keys: &[String], continuous: bool) -> Result<(), RequestError> {
        match (&self.key, self.delta) {
            (None, None) => return Err(RequestError::new("key", "an action needs a `key` (or a `delta`)")),
            (Some(k), _) if !keys.iter().any(|x| x == k) => {
                return Err(RequestError::new(
                    "key",
                    format!("unknown action `{k}`; this model takes {}", keys.join(", ")),
                ))
            }
            _ => {}
        }
        if let Some(d) = self.delta {
            if !continuous {
                return Err(RequestError::new("delta", "this model takes no continuous actions (keys only)"));
            }
            if !d.iter().all(|v| v.is_finite()) {
                return Err(RequestError::new("delta", "must be finite numbers"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_checked_against_the_model_and_name_the_field() {
        let keys: Vec<String> = ["none", "up"].iter().map(|s| s.to_string()).collect();
        assert!(ActionPart::key("up", 1).check(&keys, false).is_ok());
        let e = ActionPart::key("jump", 1).check(&keys, false).unwrap_err();
        assert_eq!(e.field, "key");
        assert!(e.rule.contains("none, up"), "{e:?}");
        let d = ActionPart { delta: Some([1.0, 0.0]), ..Default::default() };
        assert_eq!(d.check(&keys, false).unwrap_err().field, "delta");
        assert!(d.check(&keys, true).is_ok());
        assert_eq!(ActionPart::default().check(&keys, true).unwrap_err().field, "key");
        let p: ActionPart = serde_json::from_str(r#"{"action": "up", "from_frame": 9, "id": 3}"#).unwrap();
        assert_eq!((p.key.as_deref(), p.from_frame, p.id), (Some("up"), Some(9), Some(3)));
        assert!(serde_json::from_str::<ActionPart>(r#"{"keys": "up"}"#).is_err());
    }
}
