use std::io::Cursor;
use std::path::Path;

use anyhow::{Context, Result};
use bytes::Bytes;
use fastvideo_request::VideoArtifact;
use mp4::{AvcConfig, FourCC, MediaConfig, Mp4Config, Mp4Sample, Mp4Writer, TrackConfig, TrackType};

use crate::encode_h264;

/// Encodes `video` as an H.264 MP4 in memory (what the server streams and the CLI writes).
pub fn mp4_bytes(video: &VideoArtifact) -> Result<Vec<u8>> {
    let stream = encode_h264(video)?;
    let config = Mp4Config {
        major_brand: FourCC::from(*b"isom"),
        minor_version: 512,
        compatible_brands: [b"isom", b"iso2", b"avc1", b"mp41"].iter().map(|b| FourCC::from(**b)).collect(),
        timescale: 1000,
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
    w.write_end().context("finishing MP4")?;
    Ok(w.into_writer().into_inner())
}

/// Writes `video` to `path` as an H.264 MP4.
pub fn write_mp4(video: &VideoArtifact, path: &Path) -> Result<()> {
    let bytes = mp4_bytes(video)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
