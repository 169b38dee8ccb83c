//! Sound in the written files, read back by independent readers: the WAV by hound's reader, the
//! MP4's AAC track by ffmpeg's demuxer and decoder and by the `mp4` crate's reader. And a video
//! without sound is written exactly as before there was sound.

use fastvideo_media::{mp4_bytes, mp4_bytes_with_audio, wav_bytes};
use fastvideo_request::{AudioArtifact, VideoArtifact};

/// A moving square over a gradient (the same clip as roundtrip.rs).
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

/// `seconds` of stereo sound at 48 kHz: a `left` Hz tone on the left, `right` Hz on the right.
fn tones(seconds: f64, left: f64, right: f64) -> AudioArtifact {
    let rate = 48_000;
    let n = (seconds * rate as f64) as usize;
    let mut samples = Vec::with_capacity(2 * n);
    for i in 0..n {
        let t = i as f64 / rate as f64;
        samples.push((0.5 * (2.0 * std::f64::consts::PI * left * t).sin()) as f32);
        samples.push((0.5 * (2.0 * std::f64::consts::PI * right * t).sin()) as f32);
    }
    AudioArtifact { sample_rate: rate, channels: 2, samples }
}

#[test]
fn wav_round_trips_within_one_16_bit_step() {
    let mut audio = tones(0.25, 440.0, 660.0);
    // Out-of-range samples are clamped, not wrapped.
    audio.samples[0] = 1.5;
    audio.samples[1] = -3.0;
    let bytes = wav_bytes(&audio).unwrap();
    let mut r = hound::WavReader::new(std::io::Cursor::new(bytes)).unwrap();
    let spec = r.spec();
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample), (48_000, 2, 16));
    assert_eq!(spec.sample_format, hound::SampleFormat::Int);
    let back: Vec<f32> = r.samples::<i16>().map(|s| s.unwrap() as f32 / i16::MAX as f32).collect();
    assert_eq!(back.len(), audio.samples.len(), "the WAV keeps every sample");
    for (i, (a, b)) in audio.samples.iter().zip(&back).enumerate() {
        assert!((a.clamp(-1.0, 1.0) - b).abs() <= 1.0 / 32768.0, "sample {i}: {a} came back as {b}");
    }
}

#[test]
fn a_video_without_sound_is_written_as_before() {
    // Written by the MP4 writer before it could mux sound, from this same clip.
    let before = include_bytes!("data/silent_16x48x64.mp4");
    let video = clip(16, 48, 64);
    assert!(mp4_bytes(&video).unwrap() == before, "the soundless MP4 changed");
    assert!(mp4_bytes_with_audio(&video, None).unwrap() == before, "no audio must mean no audio track");
}

#[test]
fn the_muxed_track_lasts_as_long_as_the_video() {
    let video = clip(16, 48, 64); // 1 s at 16 fps
    assert_eq!(fastvideo_media::muxed_frames(&video, &tones(1.25, 440.0, 660.0)), 48_000, "trimmed");
    assert_eq!(fastvideo_media::muxed_frames(&video, &tones(0.5, 440.0, 660.0)), 48_000, "padded with silence");
}

#[cfg(not(feature = "ffmpeg"))]
#[test]
fn without_the_ffmpeg_feature_sound_is_refused_naming_it() {
    let e = mp4_bytes_with_audio(&clip(4, 48, 64), Some(&tones(0.25, 440.0, 660.0))).unwrap_err();
    assert!(e.to_string().contains("`ffmpeg` feature"), "{e}");
}

#[cfg(feature = "ffmpeg")]
mod aac {
    use super::*;
    use ffmpeg_next as av;

    /// The frequency in `lo..hi` (0.5 Hz steps) where `x`'s spectrum peaks, by a plain DFT.
    fn dominant_hz(x: &[f32], rate: f64, lo: f64, hi: f64) -> f64 {
        let power = |f: f64| {
            let w = 2.0 * std::f64::consts::PI * f / rate;
            let (re, im) = x.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, &s)| {
                (re + s as f64 * (w * i as f64).cos(), im + s as f64 * (w * i as f64).sin())
            });
            re * re + im * im
        };
        let steps = ((hi - lo) * 2.0) as usize;
        (0..=steps).map(|k| lo + k as f64 * 0.5).max_by(|a, b| power(*a).total_cmp(&power(*b))).unwrap()
    }

    struct Decoded {
        codec: av::codec::Id,
        rate: u32,
        channels: u16,
        seconds: f64,
        left: Vec<f32>,
        right: Vec<f32>,
    }

    /// Demuxes and decodes the MP4's audio stream with ffmpeg.
    fn decode(mp4: &[u8]) -> Decoded {
        let path = std::env::temp_dir().join(format!("fastvideo-media-aac-{}.mp4", std::process::id()));
        std::fs::write(&path, mp4).unwrap();
        let mut input = av::format::input(&path).unwrap();
        let stream = input.streams().best(av::media::Type::Audio).expect("an audio stream");
        let index = stream.index();
        let seconds = stream.duration() as f64 * f64::from(stream.time_base());
        let mut dec =
            av::codec::context::Context::from_parameters(stream.parameters()).unwrap().decoder().audio().unwrap();
        let mut out = Decoded {
            codec: dec.id(),
            rate: dec.rate(),
            channels: dec.channels(),
            seconds,
            left: vec![],
            right: vec![],
        };
        let mut frame = av::frame::Audio::empty();
        let mut take = |dec: &mut av::decoder::Audio, out: &mut Decoded| {
            while dec.receive_frame(&mut frame).is_ok() {
                assert_eq!(frame.format(), av::format::Sample::F32(av::format::sample::Type::Planar));
                out.left.extend_from_slice(&frame.plane::<f32>(0)[..frame.samples()]);
                out.right.extend_from_slice(&frame.plane::<f32>(1)[..frame.samples()]);
            }
        };
        for (s, packet) in input.packets() {
            if s.index() == index {
                dec.send_packet(&packet).unwrap();
                take(&mut dec, &mut out);
            }
        }
        dec.send_eof().unwrap();
        take(&mut dec, &mut out);
        let _ = std::fs::remove_file(&path);
        out
    }

    #[test]
    fn the_mp4_carries_an_aac_track_of_the_videos_length() {
        // The sound runs a quarter second past the 1 s video, as Cosmos3's does.
        let (video, audio) = (clip(16, 48, 64), tones(1.25, 440.0, 660.0));
        let bytes = mp4_bytes_with_audio(&video, Some(&audio)).unwrap();

        let d = decode(&bytes);
        assert_eq!((d.codec, d.rate, d.channels), (av::codec::Id::AAC, 48_000, 2));
        let frame = 1024.0 / 48_000.0;
        assert!((d.seconds - 1.0).abs() <= frame, "the audio stream lasts {} s", d.seconds);
        // The edit list drops the encoder's priming: what plays is the tone from its start.
        assert!((d.left.len() as f64 - 48_000.0).abs() <= 1024.0, "{} samples decoded", d.left.len());
        let mid = &d.left[4800..28_800];
        assert!((dominant_hz(mid, 48_000.0, 300.0, 800.0) - 440.0).abs() <= 3.0, "left is not 440 Hz");
        let mid = &d.right[4800..28_800];
        assert!((dominant_hz(mid, 48_000.0, 300.0, 800.0) - 660.0).abs() <= 3.0, "right is not 660 Hz");
        // The edit list skips exactly the encoder's priming: decoded sample i is input sample i
        // (a track late by the 1024 priming samples would be 0.39 of a 440 Hz cycle off).
        let rms = |lag: usize| {
            let pairs = d.left[2400..12_000].iter().zip(audio.samples.iter().step_by(2).skip(2400 - lag));
            (pairs.map(|(a, b)| (a - b).powi(2)).sum::<f32>() / 9600.0).sqrt()
        };
        // AAC's noise on this 0.35 RMS tone measures about 0.05 RMS; a 1024-sample shift, 0.4.
        assert!(rms(0) < 0.1, "the track does not start with the sound (rms error {})", rms(0));
        assert!(rms(1024) > 3.0 * rms(0), "the error measure cannot see a priming-sized shift");

        // The `mp4` crate's reader sees both tracks and the AAC description.
        let mut r = mp4::Mp4Reader::read_header(std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
        assert_eq!(r.tracks().len(), 2);
        assert_eq!(r.tracks()[&1].sample_count(), 16);
        let t = &r.tracks()[&2];
        assert_eq!(t.media_type().unwrap(), mp4::MediaType::AAC);
        assert_eq!(t.audio_profile().unwrap(), mp4::AudioObjectType::AacLowComplexity);
        assert_eq!(t.sample_freq_index().unwrap(), mp4::SampleFreqIndex::Freq48000);
        assert_eq!(t.channel_config().unwrap(), mp4::ChannelConfig::Stereo);
        assert!(r.read_sample(2, 1).unwrap().is_some_and(|s| !s.bytes.is_empty()));
    }

    #[test]
    fn odd_sound_is_refused_with_a_reason() {
        let mut a = tones(0.25, 440.0, 660.0);
        a.sample_rate = 12_345;
        let e = mp4_bytes_with_audio(&clip(4, 48, 64), Some(&a)).unwrap_err();
        assert!(e.to_string().contains("12345 Hz"), "{e}");
    }
}
