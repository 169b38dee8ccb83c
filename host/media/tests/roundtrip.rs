//! The MP4 we write is read back by an independent demuxer (the `mp4` crate's reader) and its
//! H.264 decoded by openh264's decoder: frame count, size, timing and pixels must survive.

use std::io::Cursor;

use fastvideo_media::{mp4_bytes, png_bytes};
use fastvideo_request::VideoArtifact;
use openh264::decoder::Decoder;
use openh264::formats::YUVSource;

/// A moving square over a gradient: enough structure that a broken encode shows.
fn clip(frames: u32, h: u32, w: u32) -> VideoArtifact {
    let mut rgb = Vec::new();
    for f in 0..frames {
        for y in 0..h {
            for x in 0..w {
                let inside = x >= 4 + f * 2 && x < 20 + f * 2 && (8..24).contains(&y);
                let px = if inside { [230, 40, 40] } else { [(x * 255 / w) as u8, (y * 255 / h) as u8, 128] };
                rgb.extend_from_slice(&px);
            }
        }
    }
    VideoArtifact { fps: 16, num_frames: frames, height: h, width: w, rgb }
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>() / a.len() as f64;
    10.0 * (255.0f64.powi(2) / mse.max(1e-9)).log10()
}

#[test]
fn mp4_round_trips_through_a_real_decoder() {
    let video = clip(9, 48, 64);
    let bytes = mp4_bytes(&video).unwrap();
    let size = bytes.len() as u64;
    let mut reader = mp4::Mp4Reader::read_header(Cursor::new(bytes), size).unwrap();
    assert_eq!(reader.tracks().len(), 1);
    let (&id, track) = reader.tracks().iter().next().unwrap();
    assert_eq!((track.width(), track.height()), (64, 48));
    assert_eq!(track.media_type().unwrap(), mp4::MediaType::H264);
    assert_eq!(reader.sample_count(id).unwrap(), 9);
    assert!((track.frame_rate() - 16.0).abs() < 1e-6, "fps {}", track.frame_rate());
    let sps = track.sequence_parameter_set().unwrap().to_vec();
    let pps = track.picture_parameter_set().unwrap().to_vec();

    let mut dec = Decoder::new().unwrap();
    let annexb = |nal: &[u8]| [&[0u8, 0, 0, 1][..], nal].concat();
    let mut decoded = Vec::new();
    dec.decode(&[annexb(&sps), annexb(&pps)].concat()).unwrap();
    for s in 1..=9 {
        let sample = reader.read_sample(id, s).unwrap().unwrap();
        assert_eq!(sample.is_sync, s == 1, "only the first frame is a keyframe");
        let mut packet = Vec::new();
        let mut p = &sample.bytes[..];
        while !p.is_empty() {
            let n = u32::from_be_bytes(p[..4].try_into().unwrap()) as usize;
            packet.extend(annexb(&p[4..4 + n]));
            p = &p[4 + n..];
        }
        if let Some(yuv) = dec.decode(&packet).unwrap() {
            let (w, h) = yuv.dimensions();
            let mut rgb = vec![0; w * h * 3];
            yuv.write_rgb8(&mut rgb);
            decoded.push(rgb);
        }
    }
    for yuv in dec.flush_remaining().unwrap() {
        let (w, h) = yuv.dimensions();
        let mut rgb = vec![0; w * h * 3];
        yuv.write_rgb8(&mut rgb);
        decoded.push(rgb);
    }
    assert_eq!(decoded.len(), 9, "every frame decodes");
    for (i, rgb) in decoded.iter().enumerate() {
        let p = psnr(rgb, video.frame(i));
        assert!(p > 30.0, "frame {i}: PSNR {p:.1} dB");
    }
}

/// The boxes of `data` as (type, start, end of the box).
fn boxes(data: &[u8], from: usize, to: usize) -> Vec<([u8; 4], usize, usize)> {
    let mut out = Vec::new();
    let mut at = from;
    while at + 8 <= to {
        let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8 && at + size <= to, "a box overruns its parent at {at}");
        out.push((data[at + 4..at + 8].try_into().unwrap(), at, at + size));
        at += size;
    }
    assert_eq!(at, to, "boxes fill their parent exactly");
    out
}

/// The samples of a fragmented stream, read as the ISO BMFF rules say (each `trun`'s data
/// offset from its `moof`, with `default-base-is-moof`): (bytes, sync) in order. The `mp4`
/// crate reads the init segment below but not fragments' sample offsets (it takes only
/// `tfhd`'s base offset), so this walk does that part.
fn fragment_samples(data: &[u8]) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    for (kind, start, end) in boxes(data, 0, data.len()) {
        if &kind != b"moof" {
            continue;
        }
        for (k, s, e) in boxes(data, start + 8, end) {
            if &k != b"traf" {
                continue;
            }
            for (k, s, _) in boxes(data, s + 8, e) {
                if &k != b"trun" {
                    continue;
                }
                let u32_at = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().unwrap());
                let flags = u32_at(s + 8) & 0xff_ffff;
                assert_eq!(flags, 0x701, "data offset, durations, sizes and flags per sample");
                let count = u32_at(s + 12) as usize;
                let mut at = start + u32_at(s + 16) as usize;
                for i in 0..count {
                    let (size, sample_flags) = (u32_at(s + 20 + i * 12 + 4) as usize, u32_at(s + 20 + i * 12 + 8));
                    out.push((data[at..at + size].to_vec(), sample_flags & 0x0001_0000 == 0));
                    at += size;
                }
            }
        }
    }
    out
}

/// Decodes MP4 samples (4-byte-length NAL units) after the parameter sets: the RGB frames.
fn decode(sps: &[u8], pps: &[u8], samples: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut dec = Decoder::new().unwrap();
    let annexb = |nal: &[u8]| [&[0u8, 0, 0, 1][..], nal].concat();
    dec.decode(&[annexb(sps), annexb(pps)].concat()).unwrap();
    let rgb = |yuv: &openh264::decoder::DecodedYUV| {
        let (w, h) = yuv.dimensions();
        let mut out = vec![0; w * h * 3];
        yuv.write_rgb8(&mut out);
        out
    };
    let mut frames = Vec::new();
    for sample in samples {
        let mut packet = Vec::new();
        let mut p = &sample[..];
        while !p.is_empty() {
            let n = u32::from_be_bytes(p[..4].try_into().unwrap()) as usize;
            packet.extend(annexb(&p[4..4 + n]));
            p = &p[4 + n..];
        }
        if let Some(yuv) = dec.decode(&packet).unwrap() {
            frames.push(rgb(&yuv));
        }
    }
    for yuv in dec.flush_remaining().unwrap() {
        frames.push(rgb(&yuv));
    }
    frames
}

#[test]
fn a_fragmented_stream_demuxes_and_decodes_piece_by_piece() {
    let video = clip(9, 48, 64);
    let piece = |from: u32, n: u32| {
        let px = (video.width * video.height * 3) as usize;
        let rgb = video.rgb[from as usize * px..(from + n) as usize * px].to_vec();
        VideoArtifact { num_frames: n, rgb, ..video.clone() }
    };
    let (mut w, init, first) = fastvideo_media::Fmp4Writer::start(&piece(0, 1)).unwrap();
    assert_eq!(&init[4..8], b"ftyp");
    assert_eq!(&first[4..8], b"moof");
    let mut stream = [init, first].concat();
    for (from, n) in [(1, 4), (5, 4)] {
        stream.extend(w.push(&piece(from, n)).unwrap());
    }
    assert_eq!(w.frames(), 9);
    // The init segment through an independent demuxer: one H.264 track of this size.
    let size = stream.len() as u64;
    let reader = mp4::Mp4Reader::read_header(Cursor::new(stream.clone()), size).unwrap();
    let (&id, track) = reader.tracks().iter().next().unwrap();
    assert_eq!((track.width(), track.height(), track.media_type().unwrap()), (64, 48, mp4::MediaType::H264));
    assert_eq!(reader.sample_count(id).unwrap(), 9);
    let (sps, pps) = (track.sequence_parameter_set().unwrap(), track.picture_parameter_set().unwrap());
    let samples = fragment_samples(&stream);
    let sync: Vec<bool> = samples.iter().map(|s| s.1).collect();
    let samples: Vec<Vec<u8>> = samples.into_iter().map(|s| s.0).collect();
    let frames = decode(sps, pps, &samples);
    // Each piece starts with a keyframe (a client may join at any fragment).
    assert_eq!(sync, [true, true, false, false, false, true, false, false, false]);
    assert_eq!(frames.len(), 9, "every frame decodes");
    for (i, rgb) in frames.iter().enumerate() {
        let p = psnr(rgb, video.frame(i));
        assert!(p > 30.0, "frame {i}: PSNR {p:.1} dB");
    }
    let e = w.push(&clip(1, 32, 64)).unwrap_err().to_string();
    assert!(e.contains("32"), "{e}");
}

#[test]
fn odd_sizes_are_refused_and_png_is_valid() {
    let mut v = clip(1, 48, 64);
    v.width = 63;
    let e = mp4_bytes(&v).unwrap_err().to_string();
    assert!(e.contains("even"), "{e}");
    let v = clip(1, 48, 64);
    let png = png_bytes(&v, 0).unwrap();
    let dec = png::Decoder::new(Cursor::new(png));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (64, 48));
    assert_eq!(&buf[..info.buffer_size()], v.frame(0));
}

/// NAL unit types in an Annex B access unit.
fn nal_types(annex_b: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut i = 0;
    while i + 3 < annex_b.len() {
        if annex_b[i..i + 3] == [0, 0, 1] {
            types.push(annex_b[i + 3] & 0x1f);
            i += 3;
        } else {
            i += 1;
        }
    }
    types
}

#[test]
fn live_encoder_sends_an_idr_first_and_on_request_and_decodes() {
    let video = clip(6, 48, 64);
    let mut enc = fastvideo_media::LiveH264::new(64, 48, 16).unwrap();
    let mut dec = Decoder::new().unwrap();
    let mut kinds = Vec::new();
    for i in 0..6 {
        if i == 4 {
            enc.request_keyframe();
        }
        let f = enc.encode(video.frame(i)).unwrap();
        let types = nal_types(&f.annex_b);
        // An IDR (5) carries its parameter sets (7, 8) so a receiver can join there.
        assert_eq!(f.keyframe, types.contains(&5), "frame {i}: {types:?}");
        if f.keyframe {
            assert!(types.contains(&7) && types.contains(&8), "frame {i}: {types:?}");
        }
        kinds.push(f.keyframe);
        let yuv = dec.decode(&f.annex_b).unwrap().expect("baseline has no reordering: a picture per access unit");
        let (w, h) = yuv.dimensions();
        let mut rgb = vec![0; w * h * 3];
        yuv.write_rgb8(&mut rgb);
        let p = psnr(&rgb, video.frame(i));
        assert!(p > 30.0, "frame {i}: PSNR {p:.1} dB");
    }
    assert_eq!(kinds, [true, false, false, false, true, false]);
    assert_eq!(enc.frames(), 6);
    let e = enc.encode(&[0; 10]).unwrap_err().to_string();
    assert!(e.contains("bytes"), "{e}");
    assert!(fastvideo_media::LiveH264::new(63, 48, 16).is_err());
}

#[test]
fn live_encoder_sends_an_idr_every_interval_counting_from_the_last_one() {
    let video = clip(9, 48, 64);
    let mut enc = fastvideo_media::LiveH264::new(64, 48, 16).unwrap().with_keyframe_interval(3);
    let mut kinds = Vec::new();
    for i in 0..9 {
        // A requested IDR restarts the count: the next periodic one is 3 frames after it.
        if i == 4 {
            enc.request_keyframe();
        }
        kinds.push(enc.encode(video.frame(i)).unwrap().keyframe);
    }
    assert_eq!(kinds, [true, false, false, true, true, false, false, true, false]);
}

/// The request plane's video input decoder reads what the writer wrote: every frame, the size,
/// the frame rate, and the pixels within H.264's loss.
#[test]
fn the_input_decoder_reads_our_mp4_back() {
    let v = clip(9, 32, 48);
    let bytes = mp4_bytes(&v).unwrap();
    let back = fastvideo_request::decode_video(&bytes, "inputs[0]").unwrap();
    assert_eq!((back.frames, back.width, back.height), (9, 48, 32));
    assert!((back.fps - 16.0).abs() < 1e-6, "fps {}", back.fps);
    let p = psnr(&v.rgb, &back.rgb);
    eprintln!("input decoder round trip: PSNR {p:.1} dB");
    assert!(p > 30.0, "PSNR {p:.1} dB");
}

#[test]
fn bad_videos_are_refused_naming_the_field() {
    let e = fastvideo_request::decode_video(b"not a video at all", "inputs[1]").unwrap_err();
    assert_eq!(e.field, "inputs[1]");
    assert!(e.to_string().contains("not a readable MP4"), "{e}");
    // A real MP4 cut in the middle of its media data.
    let mut bytes = mp4_bytes(&clip(9, 32, 48)).unwrap();
    bytes.truncate(bytes.len() / 2);
    assert!(fastvideo_request::decode_video(&bytes, "inputs[1]").is_err());
}
