//! Videos: the H.264 track of an MP4 into RGB8 frames. Mozilla's `mp4parse` (Firefox's MP4
//! parser, fuzzed there) reads the boxes and the sample table; openh264 decodes. Checked as it
//! goes: a video track must exist, be H.264, declare a sane size, and yield frames.

use std::io::Cursor;

use mp4parse::unstable::{create_sample_table, CheckedInteger};
use mp4parse::{SampleEntry, TrackType, VideoCodecSpecific};

use super::InputVideo;
use crate::RequestError;

/// Frames decoded at most (more than any model here generates from: Wan's limit is 81 per clip,
/// 1,025 at the rotary table's length); the rest of a longer video is not read.
pub const MAX_VIDEO_FRAMES: u32 = 1025;

/// Pixels per frame accepted (8K UHD), checked from the sample description before decoding.
const MAX_FRAME_PIXELS: u64 = 7680 * 4320;

/// The parameter sets and NAL length size of an `avcC` record (AVCDecoderConfigurationRecord).
struct AvcConfig {
    /// SPS and PPS NAL units, each behind a start code (Annex B).
    parameter_sets: Vec<u8>,
    length_size: usize,
}

fn avc_config(record: &[u8]) -> Result<AvcConfig, String> {
    let cut = || "the avcC record is cut short".to_string();
    let length_size = (*record.get(4).ok_or_else(cut)? & 3) as usize + 1;
    if length_size == 3 {
        return Err("the avcC record gives 3-byte NAL lengths".into());
    }
    let mut parameter_sets = Vec::new();
    let mut at = 5;
    for mask in [0x1f, 0xff] {
        let count = (*record.get(at).ok_or_else(cut)? & mask) as usize;
        at += 1;
        for _ in 0..count {
            let len = u16::from_be_bytes([*record.get(at).ok_or_else(cut)?, *record.get(at + 1).ok_or_else(cut)?]);
            let nal = record.get(at + 2..at + 2 + len as usize).ok_or_else(cut)?;
            parameter_sets.extend([0, 0, 0, 1]);
            parameter_sets.extend(nal);
            at += 2 + len as usize;
        }
    }
    Ok(AvcConfig { parameter_sets, length_size })
}

/// Decodes the first H.264 video track of an MP4 into RGB8 frames. `field` names the input in
/// every error.
pub fn decode_video(bytes: &[u8], field: &str) -> Result<InputVideo, RequestError> {
    let err = |m: String| RequestError::new(field, m);
    check_boxes(bytes, 0).map_err(|m| err(format!("not a readable MP4 file: {m}")))?;
    let ctx =
        mp4parse::read_mp4(&mut Cursor::new(bytes)).map_err(|e| err(format!("not a readable MP4 file: {e:?}")))?;
    let track = ctx
        .tracks
        .iter()
        .find(|t| t.track_type == TrackType::Video)
        .ok_or_else(|| err("the MP4 has no video track".into()))?;
    let entry = match track.stsd.as_ref().and_then(|d| d.descriptions.first()) {
        Some(SampleEntry::Video(v)) => v,
        _ => return Err(err("the video track has no sample description".into())),
    };
    let VideoCodecSpecific::AVCConfig(record) = &entry.codec_specific else {
        return Err(err("the video is not H.264 (only H.264 is decoded)".into()));
    };
    let (w, h) = (entry.width as u64, entry.height as u64);
    if w == 0 || h == 0 || w * h > MAX_FRAME_PIXELS {
        return Err(err(format!("the video track declares {w}x{h} pixels per frame (accepted: 1 to 7680x4320)")));
    }
    let avc = avc_config(record).map_err(|m| err(format!("not a readable H.264 track: {m}")))?;
    let samples = create_sample_table(track, CheckedInteger(0))
        .ok_or_else(|| err("the video track's sample table is missing or inconsistent".into()))?;
    let fps = match (&track.timescale, track.stts.as_ref().and_then(|t| t.samples.first())) {
        (Some(scale), Some(first)) if first.sample_delta > 0 => scale.0 as f64 / first.sample_delta as f64,
        _ => 0.0,
    };
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
    // What could hold the frames wanted is read (the decoder may hold a few back, which the
    // flush below returns).
    for (i, s) in samples.iter().take(MAX_VIDEO_FRAMES as usize + 64).enumerate() {
        if out.frames >= MAX_VIDEO_FRAMES {
            break;
        }
        let (start, end) = (s.start_offset.0, s.end_offset.0);
        let Some(sample) =
            usize::try_from(start).ok().zip(usize::try_from(end).ok()).and_then(|(a, b)| bytes.get(a..b))
        else {
            return Err(err(format!("video sample {i} lies outside the file")));
        };
        let mut packet = if i == 0 { avc.parameter_sets.clone() } else { Vec::new() };
        let mut rest = sample;
        let n = avc.length_size;
        while rest.len() >= n {
            let len = rest[..n].iter().fold(0usize, |acc, &b| acc << 8 | b as usize);
            let Some(nal) = rest.get(n..n + len) else {
                return Err(err(format!("video sample {i}: a NAL unit runs past the sample's end")));
            };
            packet.extend([0, 0, 0, 1]);
            packet.extend(nal);
            rest = &rest[n + len..];
        }
        match decoder.decode(&packet) {
            Ok(Some(yuv)) => push(&yuv, &mut out)?,
            Ok(None) => {}
            Err(e) => return Err(err(format!("H.264 sample {i} does not decode: {e}"))),
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

/// Boxes that hold boxes, and where their children start after the header (a sample
/// description's entry count; a visual sample entry's 78 bytes of fields).
fn children_at(kind: &[u8; 4]) -> Option<usize> {
    match kind {
        b"moov" | b"trak" | b"mdia" | b"minf" | b"stbl" | b"edts" | b"dinf" | b"mvex" | b"moof" | b"traf" | b"udta" => {
            Some(0)
        }
        b"stsd" => Some(8),
        b"avc1" | b"avc3" => Some(78),
        _ => None,
    }
}

/// Walks the box tree before the parser does: every box at least its header long and inside its
/// parent, nesting bounded. (The `mp4` crate, tried first, looped forever on a zero-sized box in
/// a track; this keeps such files out whatever parser reads them.)
fn check_boxes(data: &[u8], depth: usize) -> Result<(), String> {
    if depth > 16 {
        return Err("boxes nest deeper than 16".into());
    }
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() < 8 {
            return Err(format!("{} stray bytes after the last box", rest.len()));
        }
        let size32 = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        let kind: [u8; 4] = [rest[4], rest[5], rest[6], rest[7]];
        let (size, header) = match size32 {
            0 => return Err("a box sized `to the end of the file` (0) is not supported".into()),
            1 => {
                let Some(b) = rest.get(8..16) else { return Err("a 64-bit box size is cut off".into()) };
                (u64::from_be_bytes(b.try_into().expect("8 bytes")), 16)
            }
            s => (s, 8),
        };
        if size < header as u64 || size > rest.len() as u64 {
            return Err(format!(
                "box `{}` declares {size} bytes; {} remain",
                String::from_utf8_lossy(&kind),
                rest.len()
            ));
        }
        let body = &rest[header..size as usize];
        if let Some(skip) = children_at(&kind) {
            let Some(children) = body.get(skip..) else {
                return Err(format!("box `{}` is shorter than its fields", String::from_utf8_lossy(&kind)));
            };
            check_boxes(children, depth + 1)?;
        }
        rest = &rest[size as usize..];
    }
    Ok(())
}
