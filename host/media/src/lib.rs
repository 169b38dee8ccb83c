//! Encoding video artifacts: H.264 through openh264 (built from its bundled source; no system
//! ffmpeg) in an MP4 container written by the `mp4` crate, and PNG frames.

#![deny(missing_docs)]

mod fmp4;
mod h264;
mod mp4_file;
mod png_frames;

pub use fmp4::Fmp4Writer;
pub use h264::{encode_h264, FrameEncoder, H264Stream, LiveFrame, LiveH264};
pub use mp4_file::{mp4_bytes, write_mp4};
pub use png_frames::{png_bytes, write_pngs};
