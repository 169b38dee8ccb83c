//! Video inputs in the formats people upload, decoded by the `ffmpeg` build: the clips
//! tests/fixtures/video/make.sh wrote with the ffmpeg CLI (its VERSION file says which), each 9
//! frames of a known pattern, so no ffmpeg CLI is needed here. Checked: frame count, size, frame
//! rate, frames in display order (B-frames reordered), colours, and phone clips turned upright.
//! (The build without ffmpeg is tested in `src/media/video/baseline.rs`.)
#![cfg(feature = "ffmpeg")]

use fastvideo_request::{decode_video, InputVideo, MAX_VIDEO_FRAMES};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../../tests/fixtures/video/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// How far a decoded channel may stray from the pattern inside a block (6 pixels in from its
/// edges, where 4:2:0 chroma and the codecs' edge ringing do not reach). The worst measured over
/// these fixtures is given by the test's output; the pattern's grey step is 25 per frame, so a
/// frame out of order is caught at this tolerance.
const TOLERANCE: i32 = 12;
const MARGIN: u32 = 6;

/// The four blocks' colours in frame `n`, as the fixtures store them: top left, top right,
/// bottom left, bottom right.
fn blocks(n: u32) -> [[i32; 3]; 4] {
    let grey = 20 + 25 * n as i32;
    [[grey; 3], [230, 30, 40], [20, 220, 30], [30, 40, 210]]
}

/// Checks every frame against the pattern; `layout[q]` is which stored block shows in display
/// quadrant `q` (top left, top right, bottom left, bottom right). Returns the worst error.
fn check_pattern(name: &str, v: &InputVideo, layout: [usize; 4]) -> i32 {
    let (w, h) = (v.width, v.height);
    let mut worst = 0;
    for n in 0..v.frames {
        let frame = &v.rgb[(n * w * h * 3) as usize..((n + 1) * w * h * 3) as usize];
        for (q, &stored) in layout.iter().enumerate() {
            let want = blocks(n)[stored];
            let (x0, y0) = ((q as u32 % 2) * w / 2, (q as u32 / 2) * h / 2);
            for y in y0 + MARGIN..y0 + h / 2 - MARGIN {
                for x in x0 + MARGIN..x0 + w / 2 - MARGIN {
                    let at = ((y * w + x) * 3) as usize;
                    for c in 0..3 {
                        let d = (frame[at + c] as i32 - want[c]).abs();
                        worst = worst.max(d);
                        assert!(
                            d <= TOLERANCE,
                            "{name}: frame {n} ({x}, {y}) channel {c} is {} against {} (quadrant {q})",
                            frame[at + c],
                            want[c]
                        );
                    }
                }
            }
        }
    }
    worst
}

const AS_STORED: [usize; 4] = [0, 1, 2, 3];

#[test]
fn every_format_decodes_in_display_order_at_its_rate() {
    // (file, frames per second the file declares)
    let clips = [
        ("h264_high.mp4", 24.0),
        ("h264_main.mov", 30000.0 / 1001.0),
        ("h264_baseline.mp4", 25.0),
        ("hevc.mp4", 25.0),
        ("hevc.mov", 30.0),
        // 10 bits, BT.709's matrix: decoded with the matrix the file declares.
        ("hevc10_bt709.mp4", 25.0),
        ("vp8.webm", 15.0),
        ("vp9.webm", 24.0),
        ("av1.webm", 12.0),
        ("av1.mp4", 24.0),
    ];
    for (name, fps) in clips {
        let v = decode_video(&fixture(name), "video").unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((v.frames, v.width, v.height), (9, 64, 48), "{name}");
        assert_eq!(v.rgb.len(), 9 * 64 * 48 * 3, "{name}");
        assert!((v.fps - fps).abs() < 1e-3, "{name}: {} fps, expected {fps}", v.fps);
        let worst = check_pattern(name, &v, AS_STORED);
        eprintln!("{name}: worst channel error {worst}");
    }
}

#[test]
fn phone_clips_are_turned_upright() {
    // Stored 64×48; the track header turns them to 48×64 portrait.
    // 90° clockwise (iPhone, HEVC in MOV): stored bottom left comes to the top left.
    let v = decode_video(&fixture("rotated90.mov"), "video").unwrap();
    assert_eq!((v.frames, v.width, v.height, v.fps), (9, 48, 64, 30.0));
    check_pattern("rotated90.mov", &v, [2, 0, 3, 1]);
    // 270° clockwise (H.264 in MP4): stored top right comes to the top left.
    let v = decode_video(&fixture("rotated270.mp4"), "video").unwrap();
    assert_eq!((v.frames, v.width, v.height, v.fps), (9, 48, 64, 30.0));
    check_pattern("rotated270.mp4", &v, [1, 3, 0, 2]);
}

#[test]
fn limits_hold_before_decoding() {
    // Over 8K per frame: refused from the header (decoding it would take ~107 MB a frame).
    let e = decode_video(&fixture("too_large.webm"), "video").unwrap_err();
    assert_eq!(e.to_string(), "video: VP9 in WebM, 8192×4352; frames of 1 to 7680×4320 pixels are accepted");
    // 1,100 frames: the first 1,025 are decoded, the rest not read.
    let v = decode_video(&fixture("too_long.mp4"), "video").unwrap();
    assert_eq!((v.frames, v.width, v.height, v.fps), (MAX_VIDEO_FRAMES, 16, 16, 50.0));
}

#[test]
fn bad_inputs_are_refused_saying_what_was_found() {
    let e = decode_video(&fixture("mpeg4.mp4"), "video").unwrap_err();
    assert_eq!(e.to_string(), "video: mpeg4 in MP4, 9 frames; only H.264, HEVC, VP8, VP9 and AV1 video is decoded");
    let e = decode_video(b"GIF89a not a video", "inputs[0]").unwrap_err();
    assert_eq!(e.field, "inputs[0]");
    assert!(e.rule.starts_with("not a readable MP4, MOV, WebM or Matroska file"), "{e}");
    // Cut short: the header promises frames the file no longer holds.
    let mut cut = fixture("hevc.mov");
    cut.truncate(cut.len() * 2 / 3);
    let e = decode_video(&cut, "video").unwrap_err();
    eprintln!("cut short: {e}");
    assert!(e.to_string().starts_with("video: "), "{e}");
    // A WebM with its clusters gone.
    let mut cut = fixture("vp9.webm");
    cut.truncate(200);
    let e = decode_video(&cut, "video").unwrap_err();
    eprintln!("cut short: {e}");
    assert!(e.to_string().starts_with("video: "), "{e}");
}
