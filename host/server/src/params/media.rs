//! Pictures and videos in a request body: what a media field may hold (an upload, a `data:` URL,
//! base64, an upload's id), and which API field each resulting input came from.

use fastvideo_request::{ImageRole, InputPart, OmniRequest};
use serde::Deserialize;

use crate::error::ApiError;

/// An uploaded file (a multipart file field, read as `{ "b64": ..., "file_name": ... }`) or, in
/// JSON, a `data:` URL or plain base64 string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum MediaValue {
    Encoded(String),
    File {
        b64: String,
        #[allow(dead_code)]
        file_name: Option<String>,
    },
}

impl MediaValue {
    fn b64(&self) -> &str {
        match self {
            MediaValue::Encoded(s) | MediaValue::File { b64: s, .. } => s,
        }
    }

    /// The base64 this value carries, or, for an upload's id (`file-…`), that upload's.
    pub(super) fn resolve<'a>(&'a self, field: &str, uploads: &Uploads) -> Result<std::borrow::Cow<'a, str>, ApiError> {
        match self {
            MediaValue::Encoded(s) if crate::files::store::is_file_id(s) => Ok(uploads(s, field)?.into()),
            // Base64 has no `-`: this was meant as an id.
            MediaValue::Encoded(s) if s.starts_with("file-") => {
                let shown: String = s.chars().take(40).collect();
                Err(ApiError::field(
                    field,
                    format!(
                        "{field}: `{shown}` is not an upload id (`file-` then letters and digits, from POST /v1/files)"
                    ),
                ))
            }
            v => Ok(v.b64().into()),
        }
    }
}

/// Looks an upload up by id for a field: its base64, or the 400 naming the field.
pub type Uploads<'a> = dyn Fn(&str, &str) -> Result<String, ApiError> + 'a;

/// For front ends without uploads (the Dynamo worker): every id is unknown.
pub(super) fn no_uploads(id: &str, field: &str) -> Result<String, ApiError> {
    Err(ApiError::field(
        field,
        format!("{field}: `{id}` names an upload, which only the HTTP server's /v1/files keeps"),
    ))
}

/// Which of a request's inputs came from which API field, so an admission error about
/// `inputs[i]` names `input_reference`, `last_frame` or `video` instead.
pub struct MediaNames(Vec<(String, &'static str)>);

impl MediaNames {
    /// Read off a request [`CreateParams::to_request`] built.
    pub fn of(r: &OmniRequest) -> Self {
        let names = r.inputs.iter().enumerate().filter_map(|(i, part)| {
            let name = match part {
                InputPart::Image { role: ImageRole::FirstFrame, .. } => "input_reference",
                InputPart::Image { role: ImageRole::LastFrame, .. } => "last_frame",
                InputPart::Image { role: ImageRole::Reference, .. } => "image",
                InputPart::Video { .. } => "video",
                _ => return None,
            };
            Some((format!("inputs[{i}]"), name))
        });
        Self(names.collect())
    }

    /// `e` with an input's field renamed to the API's. The request plane's sub-fields of an
    /// input (`inputs[1].b64`, `.path`) are its own wire shape, not the client's: they name the
    /// API field too.
    pub fn rename(&self, e: fastvideo_engine::EngineError) -> fastvideo_engine::EngineError {
        match e {
            fastvideo_engine::EngineError::Invalid(mut re) => {
                let ours =
                    |f: &str| re.field.strip_prefix(f).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
                if let Some((_, name)) = self.0.iter().find(|(f, _)| ours(f)) {
                    re.field = name.to_string();
                }
                fastvideo_engine::EngineError::Invalid(re)
            }
            e => e,
        }
    }
}
