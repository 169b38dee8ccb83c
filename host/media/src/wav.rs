//! WAV files of audio artifacts through `hound`: 16-bit PCM, the format every player and
//! browser reads. 16 bits quantise to 1/32768 (96 dB below full scale), well under what a
//! generated waveform is accurate to (Cosmos3's bf16 audio path is about 43 dB SNR), at half the
//! size of 32-bit float.

use std::io::Cursor;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_request::AudioArtifact;

/// Encodes `audio` as a 16-bit PCM WAV in memory: every sample the model made, clamped to
/// [-1, 1] (a WAV is the model's sound as made; only the MP4's track is trimmed to the video).
pub fn wav_bytes(audio: &AudioArtifact) -> Result<Vec<u8>> {
    ensure!(audio.channels > 0 && audio.sample_rate > 0, "audio needs channels and a sample rate");
    ensure!(
        audio.samples.len().is_multiple_of(audio.channels as usize),
        "{} samples do not split into {} channels",
        audio.samples.len(),
        audio.channels
    );
    let spec = hound::WavSpec {
        channels: audio.channels,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).context("starting WAV")?;
    let mut ints = w.get_i16_writer(audio.samples.len() as u32);
    for &s in &audio.samples {
        // NaN clamps to NaN and casts to 0: silence, not a click.
        ints.write_sample((s.clamp(-1.0, 1.0) * i16::MAX as f32).round() as i16);
    }
    ints.flush().context("writing WAV samples")?;
    w.finalize().context("finishing WAV")?;
    Ok(out.into_inner())
}

/// Writes `audio` to `path` as a 16-bit PCM WAV.
pub fn write_wav(audio: &AudioArtifact, path: &Path) -> Result<()> {
    let bytes = wav_bytes(audio)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
