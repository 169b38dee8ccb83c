//! AAC-LC through libavcodec's native `aac` encoder (LGPL, in Debian's libavcodec; builds with
//! the `ffmpeg` feature), as raw access units for the MP4 writer to put in its own track.

use anyhow::{ensure, Context, Result};
use ffmpeg_next as av;

use fastvideo_request::AudioArtifact;

/// Bits per second per channel: 64 kb/s is transparent enough for generated sound and what
/// ffmpeg's encoder gives stereo by default (128 kb/s).
const BITRATE_PER_CHANNEL: usize = 64_000;

fn init() {
    static INIT: std::sync::Once = std::sync::Once::new();
    // Quiet, as fastvideo-request's decoder sets it: errors come back as results, and the
    // encoder's statistics line would otherwise land on stderr at every close.
    INIT.call_once(|| av::util::log::set_level(av::util::log::Level::Quiet));
}

/// An encoded AAC-LC stream: one raw access unit per packet, 1024 sample frames each.
pub(crate) struct AacStream {
    /// Raw AAC frames (no ADTS headers), in order, each with its duration in sample frames.
    pub packets: Vec<(Vec<u8>, u32)>,
    /// Sample frames the encoder put before the first input sample (its priming), which an edit
    /// list tells players to skip.
    pub priming: u32,
    /// Bits per second, for the track's description.
    pub bitrate: u32,
}

/// Encodes the first `frames` sample frames of `audio` (interleaved f32) as AAC-LC.
pub(crate) fn encode_aac(audio: &AudioArtifact, frames: usize) -> Result<AacStream> {
    init();
    let channels = audio.channels as usize;
    ensure!(frames > 0, "no sound to encode");
    ensure!(audio.samples.len() >= frames * channels, "the waveform is shorter than {frames} sample frames");
    let codec = av::encoder::find(av::codec::Id::AAC).context("libavcodec has no AAC encoder")?;
    let layout = av::ChannelLayout::default(channels as i32);
    let format = av::format::Sample::F32(av::format::sample::Type::Planar);
    let mut enc = av::codec::context::Context::new_with_codec(codec).encoder().audio().context("AAC encoder")?;
    enc.set_rate(audio.sample_rate as i32);
    enc.set_channel_layout(layout);
    enc.set_format(format);
    enc.set_bit_rate(BITRATE_PER_CHANNEL * channels);
    enc.set_time_base(av::Rational::new(1, audio.sample_rate as i32));
    // Raw access units; the AudioSpecificConfig goes in the MP4's `esds`, not in-band.
    enc.set_flags(av::codec::Flags::GLOBAL_HEADER);
    let mut enc = enc.open_as(codec).context("opening libavcodec's AAC encoder")?;
    let frame_size = (enc.frame_size() as usize).max(1);
    let mut out = AacStream { packets: Vec::new(), priming: 0, bitrate: (BITRATE_PER_CHANNEL * channels) as u32 };
    let mut first_pts = None;
    let mut drain = |enc: &mut av::encoder::Audio, out: &mut AacStream| {
        let mut pkt = av::Packet::empty();
        while enc.receive_packet(&mut pkt).is_ok() {
            let pts = pkt.pts().unwrap_or(0);
            first_pts.get_or_insert(pts);
            let duration = if pkt.duration() > 0 { pkt.duration() as u32 } else { frame_size as u32 };
            out.packets.push((pkt.data().unwrap_or_default().to_vec(), duration));
        }
    };
    for start in (0..frames).step_by(frame_size) {
        let n = frame_size.min(frames - start);
        let mut frame = av::frame::Audio::new(format, n, layout);
        frame.set_rate(audio.sample_rate);
        frame.set_pts(Some(start as i64));
        for c in 0..channels {
            let plane = frame.plane_mut::<f32>(c);
            for (i, s) in plane.iter_mut().take(n).enumerate() {
                *s = audio.samples[(start + i) * channels + c].clamp(-1.0, 1.0);
            }
        }
        enc.send_frame(&frame).context("AAC encoding")?;
        drain(&mut enc, &mut out);
    }
    enc.send_eof().context("AAC encoding")?;
    drain(&mut enc, &mut out);
    // The first packet is stamped before time 0 by as much as the encoder primes.
    out.priming = first_pts.map_or(0, |p| (-p).max(0) as u32);
    ensure!(!out.packets.is_empty(), "the AAC encoder gave no packets");
    Ok(out)
}
