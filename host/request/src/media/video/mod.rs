//! Video inputs into RGB8 frames. Two decoders, one chosen at build time:
//!
//! - with the `ffmpeg` feature (the `fastvideo` binary's default), ffmpeg's libraries
//!   (`ffmpeg.rs`): H.264 of any profile, HEVC, VP8, VP9 and AV1 in MP4, MOV, WebM or Matroska,
//!   frames in display order, turned as the container's display matrix says;
//! - without it (the GPU machines' build, which must start where no libavcodec is installed),
//!   Mozilla's MP4 parser and OpenH264 (`baseline.rs`): H.264 Constrained Baseline in MP4 only,
//!   anything else refused with a line that says so.
//!
//! Both check the declared frame size before decoding and stop at [`MAX_VIDEO_FRAMES`]. Errors
//! name the field and say what was found: `video: HEVC in MOV, 1920×1080, 240 frames; …`.

use std::fmt;

use super::InputVideo;
use crate::RequestError;

// Compiled (and unit-tested) in both builds, so the fallback cannot rot where ffmpeg is used.
#[cfg_attr(feature = "ffmpeg", allow(dead_code))]
mod baseline;
#[cfg(feature = "ffmpeg")]
mod ffmpeg;
mod orient;

/// Frames decoded at most (more than any model here generates from: Wan's limit is 81 per clip,
/// 1,025 at the rotary table's length); the rest of a longer video is not read.
pub const MAX_VIDEO_FRAMES: u32 = 1025;

/// Pixels per frame accepted (8K UHD), checked from the container's header before decoding.
const MAX_FRAME_PIXELS: u64 = 7680 * 4320;

/// What a build without ffmpeg reads, for its refusals.
#[cfg_attr(feature = "ffmpeg", allow(dead_code))]
const BASELINE_ONLY: &str = "this build decodes only H.264 Constrained Baseline in MP4 (OpenH264): it was built \
     without the `ffmpeg` feature, which reads H.264, HEVC, VP8, VP9 and AV1 in MP4, MOV, WebM and Matroska";

/// Decodes the first video track of `bytes` into RGB8 frames (at most [`MAX_VIDEO_FRAMES`]), in
/// display order and orientation. `field` names the input in every error.
pub fn decode_video(bytes: &[u8], field: &str) -> Result<InputVideo, RequestError> {
    #[cfg(feature = "ffmpeg")]
    return ffmpeg::decode(bytes, field);
    #[cfg(not(feature = "ffmpeg"))]
    return baseline::decode(bytes, field);
}

/// The container, as sniffed from the first bytes (ffmpeg is then told which demuxer to use, so
/// no other of its demuxers ever sees request bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Mp4,
    Mov,
    WebM,
    Matroska,
}

impl Container {
    fn sniff(bytes: &[u8]) -> Option<Container> {
        if bytes.starts_with(&[0x1a, 0x45, 0xdf, 0xa3]) {
            // The EBML header's DocType comes within its first few dozen bytes.
            let head = &bytes[..bytes.len().min(64)];
            let webm = head.windows(4).any(|w| w == b"webm");
            return Some(if webm { Container::WebM } else { Container::Matroska });
        }
        let kind = bytes.get(4..8)?;
        match kind {
            // QuickTime's own brand; files without `ftyp` are old QuickTime movies.
            b"ftyp" if bytes.get(8..12) == Some(b"qt  ") => Some(Container::Mov),
            b"ftyp" => Some(Container::Mp4),
            b"moov" | b"mdat" | b"free" | b"skip" | b"wide" | b"pnot" => Some(Container::Mov),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Container::Mp4 => "MP4",
            Container::Mov => "MOV",
            Container::WebM => "WebM",
            Container::Matroska => "Matroska",
        }
    }
}

/// What the file holds, as its header declares it: the head of every error about it.
#[derive(Debug, Clone)]
struct Described {
    codec: String,
    container: Container,
    width: u32,
    height: u32,
    /// Declared frames (MP4 and MOV declare them; WebM often does not).
    frames: Option<u64>,
}

impl fmt::Display for Described {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.codec, self.container.name())?;
        // Some headers leave the size to the stream info pass (not run): then it is not told.
        if self.width > 0 && self.height > 0 {
            write!(f, ", {}×{}", self.width, self.height)?;
        }
        match self.frames {
            Some(1) => write!(f, ", 1 frame"),
            Some(n) => write!(f, ", {n} frames"),
            None => Ok(()),
        }
    }
}

impl Described {
    /// An error about this video.
    fn error(&self, field: &str, what: impl fmt::Display) -> RequestError {
        RequestError::new(field, format!("{self}; {what}"))
    }

    /// The size check made before any decoding.
    fn check_size(&self, field: &str) -> Result<(), RequestError> {
        let pixels = self.width as u64 * self.height as u64;
        if pixels == 0 {
            return Err(self.error(field, "the header declares no frame size"));
        }
        if pixels > MAX_FRAME_PIXELS {
            return Err(self.error(field, "frames of 1 to 7680×4320 pixels are accepted"));
        }
        Ok(())
    }
}

/// Frames as they are decoded, checked one by one.
struct Frames {
    out: InputVideo,
}

impl Frames {
    fn new(fps: f64) -> Self {
        Frames { out: InputVideo { width: 0, height: 0, fps, frames: 0, rgb: Vec::new() } }
    }

    fn full(&self) -> bool {
        self.out.frames >= MAX_VIDEO_FRAMES
    }

    /// Appends one RGB8 frame of `width`×`height` (already turned for display).
    fn push(&mut self, width: u32, height: u32, rgb: &[u8]) -> Result<(), String> {
        let out = &mut self.out;
        if out.frames == 0 {
            (out.width, out.height) = (width, height);
        } else if (width, height) != (out.width, out.height) {
            return Err(format!(
                "frame {} is {width}×{height}; earlier frames are {}×{}",
                out.frames, out.width, out.height
            ));
        }
        debug_assert_eq!(rgb.len(), width as usize * height as usize * 3);
        out.rgb.extend_from_slice(rgb);
        out.frames += 1;
        Ok(())
    }

    fn finish(self) -> Result<InputVideo, String> {
        if self.out.frames == 0 {
            return Err("no frame decodes".into());
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_told_apart_by_their_first_bytes() {
        let mp4 = b"\0\0\0\x18ftypisom\0\0\x02\0isomiso2";
        let mov = b"\0\0\0\x14ftypqt  \0\0\x02\0qt  ";
        let webm = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm";
        let mkv = b"\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\x82\x88matroska";
        assert_eq!(Container::sniff(mp4), Some(Container::Mp4));
        assert_eq!(Container::sniff(mov), Some(Container::Mov));
        assert_eq!(Container::sniff(b"\0\0\0\x08moov"), Some(Container::Mov));
        assert_eq!(Container::sniff(webm), Some(Container::WebM));
        assert_eq!(Container::sniff(mkv), Some(Container::Matroska));
        assert_eq!(Container::sniff(b"#EXTM3U\nhttp://x/y.ts\n"), None);
        assert_eq!(Container::sniff(b"RIFF\0\0\0\0AVI "), None);
        assert_eq!(Container::sniff(b""), None);
    }

    #[test]
    fn a_description_reads_as_the_file_is() {
        let d =
            Described { codec: "HEVC".into(), container: Container::Mov, width: 1920, height: 1080, frames: Some(240) };
        assert_eq!(d.error("video", "it broke").to_string(), "video: HEVC in MOV, 1920×1080, 240 frames; it broke");
        let d = Described { frames: None, width: 7681, height: 4320, ..d };
        let e = d.check_size("video").unwrap_err();
        assert_eq!(e.rule, "HEVC in MOV, 7681×4320; frames of 1 to 7680×4320 pixels are accepted");
    }
}
