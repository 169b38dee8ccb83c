use std::io::Cursor;
use std::path::Path;

use anyhow::{Context, Result};
use bytes::Bytes;
use fastvideo_request::{AudioArtifact, VideoArtifact};
use mp4::{AvcConfig, FourCC, MediaConfig, Mp4Config, Mp4Sample, Mp4Writer, TrackConfig, TrackType};

use crate::encode_h264;

/// The movie timescale (ticks per second of the file's own clock, which edit lists count in).
const MOVIE_TIMESCALE: u32 = 1000;

/// Encodes `video` as an H.264 MP4 in memory (what the server streams and the CLI writes).
pub fn mp4_bytes(video: &VideoArtifact) -> Result<Vec<u8>> {
    mp4_bytes_with_audio(video, None)
}

/// Encodes `video` as an H.264 MP4 in memory and, when `audio` is given, an AAC-LC track beside
/// it lasting as long as the video (`num_frames / fps`): trimmed where the waveform runs past
/// the last frame (Cosmos3's does, and a player would hold that frame while the sound plays on),
/// padded with silence where it ends early (LTX-2's vocoder stops a few mel frames short). Without `audio` the bytes are those of [`mp4_bytes`]: no audio track at all.
/// AAC needs the `ffmpeg` feature (libavcodec's encoder); a build without it refuses sound.
pub fn mp4_bytes_with_audio(video: &VideoArtifact, audio: Option<&AudioArtifact>) -> Result<Vec<u8>> {
    let stream = encode_h264(video)?;
    let config = Mp4Config {
        major_brand: FourCC::from(*b"isom"),
        minor_version: 512,
        compatible_brands: [b"isom", b"iso2", b"avc1", b"mp41"].iter().map(|b| FourCC::from(**b)).collect(),
        timescale: MOVIE_TIMESCALE,
    };
    let mut w = Mp4Writer::write_start(Cursor::new(Vec::new()), &config).context("starting MP4")?;
    let track = TrackConfig {
        track_type: TrackType::Video,
        // One tick per frame.
        timescale: video.fps,
        language: "und".into(),
        media_conf: MediaConfig::AvcConfig(AvcConfig {
            width: stream.width as u16,
            height: stream.height as u16,
            seq_param_set: stream.sps.clone(),
            pic_param_set: stream.pps.clone(),
        }),
    };
    w.add_track(&track).context("adding the video track")?;
    for (i, (nals, key)) in stream.frames.iter().zip(&stream.keyframes).enumerate() {
        // MP4 stores NAL units length-prefixed (4 bytes, big endian), not with start codes.
        let mut data = Vec::with_capacity(nals.iter().map(|n| n.len() + 4).sum());
        for n in nals {
            data.extend_from_slice(&(n.len() as u32).to_be_bytes());
            data.extend_from_slice(n);
        }
        let sample = Mp4Sample {
            start_time: i as u64,
            duration: 1,
            rendering_offset: 0,
            is_sync: *key,
            bytes: Bytes::from(data),
        };
        w.write_sample(1, &sample).with_context(|| format!("writing frame {i}"))?;
    }
    let edit = match audio {
        Some(audio) => {
            let frames = muxed_frames(video, audio);
            let padded;
            let audio = match audio.frames() < frames {
                true => {
                    let mut samples = audio.samples.clone();
                    samples.resize(frames * audio.channels.max(1) as usize, 0.0);
                    padded = AudioArtifact { sample_rate: audio.sample_rate, channels: audio.channels, samples };
                    &padded
                }
                false => audio,
            };
            Some(audio_track::write(&mut w, audio, frames)?)
        }
        None => None,
    };
    w.write_end().context("finishing MP4")?;
    let mut bytes = w.into_writer().into_inner();
    if let Some((segment, priming)) = edit {
        crate::edit_list::insert_edit_list(&mut bytes, audio_track::TRACK_ID, segment, priming)?;
    }
    Ok(bytes)
}

/// Sample frames the MP4's audio track carries at `audio`'s rate: as many as the video lasts
/// (the waveform trimmed, or padded with silence).
pub fn muxed_frames(video: &VideoArtifact, audio: &AudioArtifact) -> usize {
    (video.num_frames as u64 * audio.sample_rate as u64).div_ceil(video.fps.max(1) as u64) as usize
}

/// Writes `video` to `path` as an H.264 MP4.
pub fn write_mp4(video: &VideoArtifact, path: &Path) -> Result<()> {
    write_mp4_with_audio(video, None, path)
}

/// Writes `video` to `path` as an H.264 MP4, with `audio` as its AAC track when given
/// (see [`mp4_bytes_with_audio`]).
pub fn write_mp4_with_audio(video: &VideoArtifact, audio: Option<&AudioArtifact>, path: &Path) -> Result<()> {
    let bytes = mp4_bytes_with_audio(video, audio)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

#[cfg(feature = "ffmpeg")]
mod audio_track {
    use anyhow::{bail, Context, Result};
    use bytes::Bytes;
    use fastvideo_request::AudioArtifact;
    use mp4::{AacConfig, AudioObjectType, ChannelConfig, MediaConfig, Mp4Sample, Mp4Writer, SampleFreqIndex};
    use mp4::{TrackConfig, TrackType};

    /// The audio track follows the video's (track 1).
    pub(super) const TRACK_ID: u32 = 2;

    /// Adds `frames` sample frames of `audio` as an AAC-LC track; returns the edit that trims
    /// it: its length in the movie's timescale and the encoder's priming in samples.
    pub(super) fn write<W: std::io::Write + std::io::Seek>(
        w: &mut Mp4Writer<W>,
        audio: &AudioArtifact,
        frames: usize,
    ) -> Result<(u32, u32)> {
        let freq_index = match audio.sample_rate {
            96000 => SampleFreqIndex::Freq96000,
            88200 => SampleFreqIndex::Freq88200,
            64000 => SampleFreqIndex::Freq64000,
            48000 => SampleFreqIndex::Freq48000,
            44100 => SampleFreqIndex::Freq44100,
            32000 => SampleFreqIndex::Freq32000,
            24000 => SampleFreqIndex::Freq24000,
            22050 => SampleFreqIndex::Freq22050,
            16000 => SampleFreqIndex::Freq16000,
            12000 => SampleFreqIndex::Freq12000,
            11025 => SampleFreqIndex::Freq11025,
            8000 => SampleFreqIndex::Freq8000,
            r => bail!("AAC in MP4 takes no {r} Hz sound (48000, 44100, 32000, 24000, 16000, ... do)"),
        };
        let chan_conf = match audio.channels {
            1 => ChannelConfig::Mono,
            2 => ChannelConfig::Stereo,
            c => bail!("the MP4 writer muxes mono or stereo sound, not {c} channels"),
        };
        let aac = crate::aac::encode_aac(audio, frames)?;
        let track = TrackConfig {
            track_type: TrackType::Audio,
            // One tick per sample frame.
            timescale: audio.sample_rate,
            language: "und".into(),
            media_conf: MediaConfig::AacConfig(AacConfig {
                bitrate: aac.bitrate,
                profile: AudioObjectType::AacLowComplexity,
                freq_index,
                chan_conf,
            }),
        };
        w.add_track(&track).context("adding the audio track")?;
        let mut start = 0u64;
        for (i, (data, duration)) in aac.packets.into_iter().enumerate() {
            let sample =
                Mp4Sample { start_time: start, duration, rendering_offset: 0, is_sync: true, bytes: Bytes::from(data) };
            w.write_sample(TRACK_ID, &sample).with_context(|| format!("writing audio frame {i}"))?;
            start += duration as u64;
        }
        let segment = (frames as u64 * super::MOVIE_TIMESCALE as u64).div_ceil(audio.sample_rate as u64);
        Ok((segment as u32, aac.priming))
    }
}

#[cfg(not(feature = "ffmpeg"))]
mod audio_track {
    use anyhow::{bail, Result};
    use fastvideo_request::AudioArtifact;
    use mp4::Mp4Writer;

    /// The audio track would follow the video's (track 1).
    pub(super) const TRACK_ID: u32 = 2;

    /// Refuses: this build has no AAC encoder.
    pub(super) fn write<W>(_: &mut Mp4Writer<W>, _: &AudioArtifact, _: usize) -> Result<(u32, u32)> {
        bail!(
            "muxing sound into an MP4 needs the `ffmpeg` feature (libavcodec's AAC encoder), which this build \
             lacks; the WAV (--audio-out) still works"
        )
    }
}
