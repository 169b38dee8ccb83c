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
}

impl ImageRole {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageRole::FirstFrame => "first_frame",
            ImageRole::LastFrame => "last_frame",
            ImageRole::Reference => "reference",
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
