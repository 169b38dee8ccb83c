//! An edit list (`edts`/`elst`) put into a finished MP4's track, which the `mp4` crate's writer
//! cannot write: it tells players to skip an AAC encoder's priming samples and to stop where the
//! sound does, so the track starts with the first frame and lasts as long as the audio muxed.

use anyhow::{bail, ensure, Context, Result};

/// A box's size and four-character type at `pos` (32-bit sizes only: the writer's `moov` and
/// `trak` boxes are far below 4 GiB).
fn header(data: &[u8], pos: usize) -> Result<(usize, [u8; 4])> {
    let b = data.get(pos..pos + 8).context("MP4 box header past the end")?;
    let size = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    ensure!(size >= 8 && pos + size <= data.len(), "MP4 box at {pos} has a bad size {size}");
    Ok((size, [b[4], b[5], b[6], b[7]]))
}

fn bump(data: &mut [u8], pos: usize, by: usize) {
    let size = u32::from_be_bytes(data[pos..pos + 4].try_into().unwrap()) + by as u32;
    data[pos..pos + 4].copy_from_slice(&size.to_be_bytes());
}

/// Puts one edit into track `track_id` of `mp4` (which the `mp4` crate wrote: `moov` holds
/// the `trak`s, each opening with its `tkhd`): play `segment_duration` (in the movie's
/// timescale) of the media from `media_time` (in the track's timescale) on.
pub(crate) fn insert_edit_list(mp4: &mut Vec<u8>, track_id: u32, segment_duration: u32, media_time: u32) -> Result<()> {
    let (mut pos, mut mdat) = (0, false);
    let moov = loop {
        let (size, kind) = header(mp4, pos)?;
        mdat |= &kind == b"mdat";
        if &kind == b"moov" {
            break pos;
        }
        pos += size;
    };
    // Growing a `moov` after the samples moves none of them.
    ensure!(mdat, "the MP4's moov comes before its samples");
    let (moov_size, _) = header(mp4, moov)?;
    let mut pos = moov + 8;
    while pos < moov + moov_size {
        let (size, kind) = header(mp4, pos)?;
        if &kind == b"trak" {
            let tkhd = pos + 8;
            let (tkhd_size, kind) = header(mp4, tkhd)?;
            ensure!(&kind == b"tkhd", "a trak that does not open with its tkhd");
            // Version 1 headers carry 64-bit creation and modification times.
            let id_at = tkhd + 12 + if mp4[tkhd + 8] == 1 { 16 } else { 8 };
            let id = u32::from_be_bytes(mp4[id_at..id_at + 4].try_into().unwrap());
            if id == track_id {
                let mut edts = Vec::with_capacity(36);
                edts.extend_from_slice(&36u32.to_be_bytes());
                edts.extend_from_slice(b"edts");
                edts.extend_from_slice(&28u32.to_be_bytes());
                edts.extend_from_slice(b"elst");
                edts.extend_from_slice(&0u32.to_be_bytes()); // version 0, no flags
                edts.extend_from_slice(&1u32.to_be_bytes()); // one entry
                edts.extend_from_slice(&segment_duration.to_be_bytes());
                edts.extend_from_slice(&media_time.to_be_bytes());
                edts.extend_from_slice(&0x0001_0000u32.to_be_bytes()); // rate 1.0
                let at = tkhd + tkhd_size;
                mp4.splice(at..at, edts);
                bump(mp4, pos, 36);
                bump(mp4, moov, 36);
                return Ok(());
            }
        }
        pos += size;
    }
    bail!("the MP4 has no track {track_id}")
}
