//! Videos: the H.264 track of an MP4 into RGB8 frames (the `mp4` demuxer, openh264's decoder),
//! checked as it goes: a track must exist, declare a sane size, and yield frames.

use std::io::Cursor;

use super::InputVideo;
use crate::RequestError;

/// Frames decoded at most (more than any model here generates from: Wan's limit is 81 per clip,
/// 1,025 at the rotary table's length); the rest of a longer video is not read.
pub const MAX_VIDEO_FRAMES: u32 = 1025;

/// Pixels per frame accepted (8K UHD), checked from the track header before decoding.
const MAX_FRAME_PIXELS: u64 = 7680 * 4320;

/// Decodes the first H.264 video track of an MP4 into RGB8 frames. `field` names the input in
/// every error.
pub fn decode_video(bytes: &[u8], field: &str) -> Result<InputVideo, RequestError> {
    let err = |m: String| RequestError::new(field, m);
    let mut mp4 = mp4::Mp4Reader::read_header(Cursor::new(bytes), bytes.len() as u64)
        .map_err(|e| err(format!("not a readable MP4 file: {e}")))?;
    let mut ids: Vec<u32> = mp4.tracks().keys().copied().collect();
    ids.sort_unstable();
    let track_id = ids
        .into_iter()
        .find(|id| matches!(mp4.tracks()[id].media_type(), Ok(mp4::MediaType::H264)))
        .ok_or_else(|| err("the MP4 has no H.264 video track (only H.264 is decoded)".into()))?;
    let track = &mp4.tracks()[&track_id];
    let (w, h) = (track.width() as u64, track.height() as u64);
    if w == 0 || h == 0 || w * h > MAX_FRAME_PIXELS {
        return Err(err(format!("the video track declares {w}x{h} pixels per frame (accepted: 1 to 7680x4320)")));
    }
    let fps = track.frame_rate();
    let samples = track.sample_count();
    // Annex B for the decoder: the parameter sets first, then each sample's length-prefixed NAL
    // units with start codes.
    let mut head = Vec::new();
    for ps in [track.sequence_parameter_set(), track.picture_parameter_set()] {
        let ps = ps.map_err(|e| err(format!("the H.264 track has no parameter sets: {e}")))?;
        head.extend([0, 0, 0, 1]);
        head.extend(ps);
    }
    let mut decoder =
        openh264::decoder::Decoder::new().map_err(|e| err(format!("the H.264 decoder did not start: {e}")))?;
    let mut out = InputVideo { width: 0, height: 0, fps, frames: 0, rgb: Vec::new() };
    let push = |yuv: &openh264::decoder::DecodedYUV, out: &mut InputVideo| -> Result<(), RequestError> {
        use openh264::formats::YUVSource;
        let (fw, fh) = yuv.dimensions();
        if out.frames == 0 {
            (out.width, out.height) = (fw as u32, fh as u32);
        } else if (fw as u32, fh as u32) != (out.width, out.height) {
            return Err(err(format!(
                "frame {} is {fw}x{fh}; earlier frames are {}x{}",
                out.frames, out.width, out.height
            )));
        }
        let start = out.rgb.len();
        out.rgb.resize(start + fw * fh * 3, 0);
        yuv.write_rgb8(&mut out.rgb[start..]);
        out.frames += 1;
        Ok(())
    };
    for id in 1..=samples {
        if out.frames >= MAX_VIDEO_FRAMES {
            break;
        }
        let Some(sample) = mp4.read_sample(track_id, id).map_err(|e| err(format!("MP4 sample {id}: {e}")))? else {
            continue;
        };
        let mut packet = if id == 1 { head.clone() } else { Vec::new() };
        let mut rest: &[u8] = &sample.bytes;
        while rest.len() >= 4 {
            let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let Some(nal) = rest.get(4..4 + n) else {
                return Err(err(format!("MP4 sample {id}: a NAL unit runs past the sample's end")));
            };
            packet.extend([0, 0, 0, 1]);
            packet.extend(nal);
            rest = &rest[4 + n..];
        }
        match decoder.decode(&packet) {
            Ok(Some(yuv)) => push(&yuv, &mut out)?,
            Ok(None) => {}
            Err(e) => return Err(err(format!("H.264 sample {id} does not decode: {e}"))),
        }
    }
    if out.frames < MAX_VIDEO_FRAMES {
        let rest = decoder.flush_remaining().map_err(|e| err(format!("H.264 decoder: {e}")))?;
        for yuv in rest.iter().take((MAX_VIDEO_FRAMES - out.frames) as usize) {
            push(yuv, &mut out)?;
        }
    }
    if out.frames == 0 {
        return Err(err("the video has no frames".into()));
    }
    Ok(out)
}
