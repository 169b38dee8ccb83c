//! Decoded conditioning media a request carries once the host has read and checked its inputs:
//! the pipeline sees pixels, never paths or base64.

use serde::{Deserialize, Serialize};

/// Where a conditioning picture goes in the video.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageRole {
    /// The video starts from it (image-to-video; the default).
    #[default]
    FirstFrame,
    /// The video ends on it (first-and-last-frame models).
    LastFrame,
    /// A picture an edit starts from or draws on (`i2i`; several may be given).
    Reference,
    /// A picture at a given frame with a strength (a `keyframe` input; several may be given).
    Keyframe,
}

impl ImageRole {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageRole::FirstFrame => "first_frame",
            ImageRole::LastFrame => "last_frame",
            ImageRole::Reference => "reference",
            ImageRole::Keyframe => "keyframe",
        }
    }
}

/// One decoded picture, RGB8 row-major `[height, width, 3]`, as the user gave it (any resize to
/// the output size is the pipeline's, which knows the model's policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputImage {
    /// Where it goes in the video.
    pub role: ImageRole,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `height * width * 3` bytes.
    pub rgb: Vec<u8>,
}

/// A picture placed at a frame of the video with a strength (LTX-2's condition pipeline:
/// `LTX2VideoCondition`), decoded and checked by `resolve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Keyframe {
    /// The picture (role [`ImageRole::Keyframe`]).
    pub image: InputImage,
    /// The output frame it is placed at (0-based, one the model can place a picture at).
    pub frame: u32,
    /// How strongly it holds, in `[0, 1]` (1: kept as given; 0: no hold).
    pub strength: f64,
}

/// A decoded video, RGB8 row-major `[frames, height, width, 3]`, as the user gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputVideo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Frames per second the file declares (0 when it declares none).
    pub fps: f64,
    /// Frame count.
    pub frames: u32,
    /// `frames * height * width * 3` bytes.
    pub rgb: Vec<u8>,
}

mod image;
mod reframe;
mod video;

pub use self::image::{decode_image, image_bytes, MAX_IMAGE_PIXELS};
pub use self::reframe::{
    check_fit, fitted_size, reframe, Reframed, ResizeMode, MAX_FITTED_ASPECT, MAX_FITTED_PIXELS, MAX_FITTED_SIDE,
};
pub use self::video::{decode_video, MAX_VIDEO_FRAMES};
