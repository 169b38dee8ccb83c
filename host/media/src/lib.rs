//! Encoding video and audio artifacts: H.264 through openh264 (built from its bundled source) in
//! an MP4 container written by the `mp4` crate, with an AAC-LC track beside it when the output
//! has sound (libavcodec's encoder, the `ffmpeg` feature); WAV files; PNG frames.

#![deny(missing_docs)]

#[cfg(feature = "ffmpeg")]
mod aac;
mod edit_list;
mod fmp4;
mod h264;
mod mp4_file;
mod png_frames;
mod wav;

pub use fmp4::Fmp4Writer;
pub use h264::{encode_h264, FrameEncoder, H264Stream, LiveFrame, LiveH264};
pub use mp4_file::{mp4_bytes, mp4_bytes_with_audio, muxed_frames, write_mp4, write_mp4_with_audio};
pub use png_frames::{png_bytes, write_pngs};
pub use wav::{wav_bytes, write_wav};

/// Whether this build can put sound into an MP4 (AAC needs the `ffmpeg` feature); a front end
/// without it keeps the sound in a WAV instead of failing after the work is done.
pub const fn can_mux_audio() -> bool {
    cfg!(feature = "ffmpeg")
}
