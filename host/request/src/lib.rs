//! The request plane (docs/architecture.md): what a caller asks for, what it gets back, and what it sees
//! while it waits.
//!
//! Everything here is plain serde data with no tensors, so the CLI, the HTTP server and plugins can
//! share it. A request declares its [`TaskType`]; nothing is inferred from which inputs happen to be
//! present. [`OmniRequest::resolve`] checks a request against a model's [`ModelLimits`] and fills
//! defaults, producing a [`ResolvedRequest`] whose every parameter is concrete — the only form the
//! pipeline accepts.
//!
//! ```rust
//! use fastvideo_request::{ModelLimits, OmniRequest, TaskType};
//!
//! let limits = ModelLimits::example(); // Wan-like: 64x64, 17 frames, 20 steps by default
//! let req: OmniRequest = serde_json::from_str(
//!     r#"{
//!         "request_id": "r1",
//!         "task": "t2v",
//!         "inputs": [{"type": "text", "text": "a red circle"}],
//!         "diffusion": {"num_inference_steps": 8}
//!     }"#,
//! )
//! .unwrap();
//!
//! // Given fields are kept, missing ones come from the model's defaults, and the seed from the
//! // closure because the request has none.
//! let r = req.resolve(&limits, || 42).unwrap();
//! assert_eq!(r.task, TaskType::T2v);
//! assert_eq!(r.prompt, "a red circle");
//! assert_eq!((r.steps, r.height, r.width, r.num_frames, r.seed), (8, 64, 64, 17, 42));
//!
//! // A value the model cannot take is refused with the field's dotted path.
//! let mut bad = req.clone();
//! bad.diffusion.num_frames = Some(16);
//! let e = bad.resolve(&limits, || 42).unwrap_err();
//! assert_eq!(e.field, "diffusion.num_frames");
//! assert!(e.to_string().starts_with("diffusion.num_frames: 16: Wan needs frames = 4k+1"), "{e}");
//!
//! // Unknown fields are refused at parse time.
//! let typo = r#"{"request_id": "r2", "task": "t2v", "inputs": [], "stepz": 3}"#;
//! assert!(serde_json::from_str::<OmniRequest>(typo).unwrap_err().to_string().contains("stepz"));
//!
//! // Except in `diffusion`, where a model's own knobs (its `KnobSchema`) sit beside the common
//! // fields: one this model does not take is refused by `resolve`, naming it and the ones it does.
//! let typo = r#"{"request_id": "r2", "task": "t2v", "inputs": [{"type": "text", "text": "a"}],
//!                "diffusion": {"stepz": 3}}"#;
//! let e = serde_json::from_str::<OmniRequest>(typo).unwrap().resolve(&limits, || 42).unwrap_err();
//! assert_eq!(e.to_string(), "diffusion.stepz: not a parameter of this Wan model (this model's own parameters: none)");
//! ```

#![deny(missing_docs)]

mod action;
pub mod chat;
mod error;
mod event;
mod inputs;
mod knobs;
mod lora;
mod media;
mod output;
mod request;
mod resolve;
mod seed;

pub use action::ActionPart;
pub use error::RequestError;
pub use event::OmniEvent;
pub use knobs::{number, number_f32, Knob, KnobDefault, KnobKind, KnobSchema};
pub use lora::{resolve_lora, LoraChoice, LoraExpert, LoraUse, MAX_LORA_SCALE};
pub use media::{
    check_fit, decode_image, decode_video, fitted_size, image_bytes, reframe, ImageRole, InputImage, InputVideo,
    Keyframe, Reframed, ResizeMode, MAX_FITTED_ASPECT, MAX_FITTED_PIXELS, MAX_FITTED_SIDE, MAX_IMAGE_PIXELS,
    MAX_VIDEO_FRAMES,
};
pub use output::{
    Artifact, AudioArtifact, LatentsArtifact, OmniOutput, RequestMetrics, TrajectoryArtifact, VideoArtifact,
};
pub use request::{
    DiffusionParams, InputPart, Modality, OmniRequest, OutputSpec, SamplerKind, SamplingParams, TaskType, TextRole,
};
pub use resolve::{
    canvas, is_action_task, ActionCondition, ActionDomain, ActionLimits, AudioLimits, CanvasBin, Defaults, LatentInput,
    ModelLimits, PartialSchedule, PictureLimits, ReferenceLimits, ResolvedAction, ResolvedRequest, VideoLimits,
    DEFAULT_NOISE_LEVEL, DEFAULT_STRENGTH,
};
pub use resolve::{rcm_levels, RCM_SIGMA_MAX};
pub use seed::random_seed;
