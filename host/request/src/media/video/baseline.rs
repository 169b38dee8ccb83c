//! The decoder of builds without ffmpeg: the H.264 track of an MP4 into RGB8 frames. Mozilla's
//! `mp4parse` (Firefox's MP4 parser, fuzzed there) reads the boxes and the sample table;
//! OpenH264 (the writer side's build) decodes, which reads Constrained Baseline only, so other
//! profiles are refused from the `avcC` record before decoding. Checked as it goes: a video track
//! must exist, be H.264, declare a sane size, and yield frames; frames are turned as the track
//! header's matrix says.

use std::io::Cursor;

use mp4parse::unstable::{create_sample_table, CheckedInteger};
use mp4parse::{SampleEntry, TrackType, VideoCodecSpecific};

use super::orient::Orientation;
use super::{Container, Described, Frames, BASELINE_ONLY, MAX_VIDEO_FRAMES};
use crate::{InputVideo, RequestError};

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

/// The H.264 profile of an `avcC` record, by name, and whether OpenH264 decodes it.
fn avc_profile(record: &[u8]) -> (String, bool) {
    let (idc, constraints) = (record.get(1).copied().unwrap_or(0), record.get(2).copied().unwrap_or(0));
    let name = match idc {
        66 if constraints & 0x40 != 0 => "Constrained Baseline".to_string(),
        66 => "Baseline".into(),
        77 => "Main".into(),
        88 => "Extended".into(),
        100 => "High".into(),
        110 => "High 10".into(),
        122 => "High 4:2:2".into(),
        244 => "High 4:4:4".into(),
        other => format!("profile {other}"),
    };
    (name, idc == 66)
}

/// Decodes the first H.264 video track of an MP4 into RGB8 frames. `field` names the input in
/// every error.
pub(super) fn decode(bytes: &[u8], field: &str) -> Result<InputVideo, RequestError> {
    let err = |m: String| RequestError::new(field, m);
    let container = match Container::sniff(bytes) {
        Some(c @ (Container::Mp4 | Container::Mov)) => c,
        Some(c) => return Err(err(format!("a {} file; {BASELINE_ONLY}", c.name()))),
        None => return Err(err("not a readable MP4, MOV, WebM or Matroska file (no header of any)".into())),
    };
    let unreadable = |m: String| err(format!("not a readable {} file: {m}", container.name()));
    let mut entries = Vec::new();
    check_boxes(bytes, 0, &mut entries).map_err(unreadable)?;
    let ctx = mp4parse::read_mp4(&mut Cursor::new(bytes)).map_err(|e| unreadable(format!("{e:?}")))?;
    let track = ctx
        .tracks
        .iter()
        .find(|t| t.track_type == TrackType::Video)
        .ok_or_else(|| err(format!("the {} file has no video track", container.name())))?;
    let samples = create_sample_table(track, CheckedInteger(0));
    let mut described = Described {
        codec: entry_codec(&entries).into(),
        container,
        width: 0,
        height: 0,
        frames: samples.as_ref().map(|s| s.len() as u64),
    };
    let entry = match track.stsd.as_ref().and_then(|d| d.descriptions.first()) {
        Some(SampleEntry::Video(v)) => v,
        Some(SampleEntry::Unknown) => return Err(described.error(field, BASELINE_ONLY)),
        _ => return Err(err("the video track has no sample description".into())),
    };
    (described.width, described.height) = (entry.width as u32, entry.height as u32);
    let VideoCodecSpecific::AVCConfig(record) = &entry.codec_specific else {
        return Err(described.error(field, BASELINE_ONLY));
    };
    let (profile, decodable) = avc_profile(record);
    described.codec = format!("H.264 {profile}");
    if !decodable {
        return Err(described.error(field, BASELINE_ONLY));
    }
    described.check_size(field)?;
    let avc = avc_config(record).map_err(|m| described.error(field, format!("not a readable H.264 track: {m}")))?;
    let samples =
        samples.ok_or_else(|| described.error(field, "the video track's sample table is missing or inconsistent"))?;
    let fps = match (&track.timescale, track.stts.as_ref().and_then(|t| t.samples.first())) {
        (Some(scale), Some(first)) if first.sample_delta > 0 => scale.0 as f64 / first.sample_delta as f64,
        _ => 0.0,
    };
    let fail = |m: String| described.error(field, m);
    let mut decoder =
        openh264::decoder::Decoder::new().map_err(|e| fail(format!("the H.264 decoder did not start: {e}")))?;
    // The track header's display matrix (a phone's portrait clip), as ffmpeg reads it.
    let orientation = track.tkhd.as_ref().map_or(Orientation::UPRIGHT, |t| {
        let m = &t.matrix;
        Orientation::from_matrix(&[m.a, m.b, m.u, m.c, m.d, m.v, m.x, m.y, m.w]).unwrap_or(Orientation::UPRIGHT)
    });
    let mut frames = Frames::new(fps);
    let (mut rgb, mut turned) = (Vec::new(), Vec::new());
    let mut push = |yuv: &openh264::decoder::DecodedYUV, frames: &mut Frames| -> Result<(), RequestError> {
        use openh264::formats::YUVSource;
        let (w, h) = yuv.dimensions();
        rgb.resize(w * h * 3, 0);
        yuv.write_rgb8(&mut rgb);
        orientation.apply(&rgb, w as u32, h as u32, &mut turned);
        let (tw, th) = orientation.size(w as u32, h as u32);
        frames.push(tw, th, &turned).map_err(fail)
    };
    // What could hold the frames wanted is read (the decoder may hold a few back, which the
    // flush below returns).
    for (i, s) in samples.iter().take(MAX_VIDEO_FRAMES as usize + 64).enumerate() {
        if frames.full() {
            break;
        }
        let (start, end) = (s.start_offset.0, s.end_offset.0);
        let Some(sample) =
            usize::try_from(start).ok().zip(usize::try_from(end).ok()).and_then(|(a, b)| bytes.get(a..b))
        else {
            return Err(fail(format!("sample {i} lies outside the file")));
        };
        let mut packet = if i == 0 { avc.parameter_sets.clone() } else { Vec::new() };
        let mut rest = sample;
        let n = avc.length_size;
        while rest.len() >= n {
            let len = rest[..n].iter().fold(0usize, |acc, &b| acc << 8 | b as usize);
            let Some(nal) = rest.get(n..n + len) else {
                return Err(fail(format!("sample {i}: a NAL unit runs past the sample's end")));
            };
            packet.extend([0, 0, 0, 1]);
            packet.extend(nal);
            rest = &rest[n + len..];
        }
        // OpenH264's error is its internal state: the sample number is what helps.
        match decoder.decode(&packet) {
            Ok(Some(yuv)) => push(&yuv, &mut frames)?,
            Ok(None) => {}
            Err(_) => return Err(fail(format!("sample {i} does not decode (corrupt, or not Constrained Baseline)"))),
        }
    }
    if !frames.full() {
        let rest = decoder.flush_remaining().map_err(|_| fail("the last frames do not decode".into()))?;
        for yuv in rest.iter().take((MAX_VIDEO_FRAMES - frames.out.frames) as usize) {
            push(yuv, &mut frames)?;
        }
    }
    frames.finish().map_err(fail)
}

/// The codec of the first video sample entry a `stsd` box lists, by its four-character code.
fn entry_codec(entries: &[[u8; 4]]) -> &'static str {
    entries
        .iter()
        .find_map(|kind| match kind {
            b"avc1" | b"avc3" => Some("H.264"),
            b"hvc1" | b"hev1" => Some("HEVC"),
            b"vp08" => Some("VP8"),
            b"vp09" => Some("VP9"),
            b"av01" => Some("AV1"),
            b"mp4v" => Some("MPEG-4 Part 2"),
            b"s263" => Some("H.263"),
            b"apch" | b"apcn" | b"apcs" | b"apco" | b"ap4h" => Some("ProRes"),
            b"encv" => Some("encrypted video"),
            _ => None,
        })
        .unwrap_or("an unknown codec")
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

/// The kinds of the boxes laid one after another in `data` (as far as they are whole).
fn children_kinds(mut data: &[u8]) -> Vec<[u8; 4]> {
    let mut kinds = Vec::new();
    while let (Some(size), Some(kind)) = (data.get(..4), data.get(4..8)) {
        kinds.push(kind.try_into().expect("4 bytes"));
        let size = u32::from_be_bytes(size.try_into().expect("4 bytes")) as usize;
        if size < 8 || size > data.len() {
            break;
        }
        data = &data[size..];
    }
    kinds
}

/// Walks the box tree before the parser does: every box at least its header long and inside its
/// parent, nesting bounded. (The `mp4` crate, tried first, looped forever on a zero-sized box in
/// a track; this keeps such files out whatever parser reads them.)
/// The kinds of the sample entries met (`stsd`'s children) go to `entries`.
fn check_boxes(data: &[u8], depth: usize, entries: &mut Vec<[u8; 4]>) -> Result<(), String> {
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
            if &kind == b"stsd" {
                entries.extend(children_kinds(children));
            }
            check_boxes(children, depth + 1, entries)?;
        }
        rest = &rest[size as usize..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The fallback on the clips of tests/fixtures/video (make.sh), in every build.
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/../../tests/fixtures/video/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The pixel at (x, y) of frame `n`.
    fn pixel(v: &InputVideo, n: u32, x: u32, y: u32) -> [u8; 3] {
        let at = (((n * v.height + y) * v.width + x) * 3) as usize;
        v.rgb[at..at + 3].try_into().unwrap()
    }

    fn near(got: [u8; 3], want: [u8; 3]) -> bool {
        got.iter().zip(want).all(|(&g, w)| (g as i32 - w as i32).abs() <= 12)
    }

    #[test]
    fn constrained_baseline_decodes_upright() {
        let v = decode(&fixture("h264_baseline.mp4"), "video").unwrap();
        assert_eq!((v.frames, v.width, v.height, v.fps), (9, 64, 48, 25.0));
        // Top left grey 20 + 25·n, top right red (make.sh's pattern).
        assert!(near(pixel(&v, 8, 16, 12), [220; 3]), "{:?}", pixel(&v, 8, 16, 12));
        assert!(near(pixel(&v, 0, 48, 12), [230, 30, 40]), "{:?}", pixel(&v, 0, 48, 12));
        // Stored 64×48, turned 270° clockwise: the red top right block comes to the top left.
        let v = decode(&fixture("rotated270.mp4"), "video").unwrap();
        assert_eq!((v.frames, v.width, v.height), (9, 48, 64));
        assert!(near(pixel(&v, 0, 12, 16), [230, 30, 40]), "{:?}", pixel(&v, 0, 12, 16));
        assert!(near(pixel(&v, 4, 12, 48), [120; 3]), "{:?}", pixel(&v, 4, 12, 48));
        // Past the frame limit: the rest is not read.
        let v = decode(&fixture("too_long.mp4"), "video").unwrap();
        assert_eq!((v.frames, v.width, v.height), (MAX_VIDEO_FRAMES, 16, 16));
    }

    #[test]
    fn everything_else_is_refused_saying_what_it_is() {
        let refused = |name: &str| decode(&fixture(name), "video").unwrap_err().to_string();
        let only = format!("; {BASELINE_ONLY}");
        assert_eq!(refused("h264_high.mp4"), format!("video: H.264 High in MP4, 64×48, 9 frames{only}"));
        assert_eq!(refused("h264_main.mov"), format!("video: H.264 Main in MOV, 64×48, 9 frames{only}"));
        assert_eq!(refused("hevc.mov"), format!("video: HEVC in MOV, 9 frames{only}"));
        assert_eq!(refused("av1.mp4"), format!("video: AV1 in MP4, 64×48, 9 frames{only}"));
        assert_eq!(refused("vp9.webm"), format!("video: a WebM file{only}"));
        let e = decode(b"not a video at all", "inputs[1]").unwrap_err();
        assert_eq!(e.to_string(), "inputs[1]: not a readable MP4, MOV, WebM or Matroska file (no header of any)");
    }
}
