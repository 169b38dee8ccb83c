//! Fragmented MP4 (ISO BMFF with movie fragments, as MSE players and `ffplay` read a live
//! stream): one init segment (`ftyp` + `moov` with an empty sample table and `mvex`), then one
//! `moof` + `mdat` per piece of video as it is made. A causal video job streams these while its
//! chunks finish; the pieces concatenated are a playable file.
//!
//! One encoder runs through all pieces, each piece starting with a forced IDR, so a client can
//! start decoding at any fragment and consecutive IDRs still carry distinct ids (as H.264
//! requires; separate encoders would restart the numbering).

use anyhow::{ensure, Result};
use fastvideo_request::VideoArtifact;

use crate::FrameEncoder;

/// Writes the segments of one video track.
pub struct Fmp4Writer {
    enc: FrameEncoder,
    width: u32,
    height: u32,
    fps: u32,
    /// The parameter sets of the first piece (the init segment's `avcC`).
    sps: Vec<u8>,
    pps: Vec<u8>,
    /// Frames written so far (the next fragment's decode time, in frames).
    frames: u64,
    sequence: u32,
}

fn boxed(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(body.len() + 8);
    b.extend_from_slice(&(body.len() as u32 + 8).to_be_bytes());
    b.extend_from_slice(kind);
    b.extend_from_slice(body);
    b
}

fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(body.len() + 4);
    b.extend_from_slice(&((version as u32) << 24 | flags).to_be_bytes());
    b.extend_from_slice(body);
    boxed(kind, &b)
}

/// Encoded frames: each frame's NAL units, and whether each is a keyframe.
type Frames = (Vec<Vec<Vec<u8>>>, Vec<bool>);

/// A piece's frames, the first an IDR.
fn encode_piece(enc: &mut FrameEncoder, piece: &VideoArtifact) -> Result<Frames> {
    ensure!(piece.num_frames > 0, "a piece without frames");
    ensure!(
        piece.rgb.len() == piece.num_frames as usize * enc.frame_bytes(),
        "a piece's buffer does not match its frames"
    );
    let mut frames = Vec::new();
    let mut keys = Vec::new();
    for i in 0..piece.num_frames as usize {
        let (nals, key) = enc.frame(piece.frame(i), i == 0)?;
        frames.push(nals);
        keys.push(key);
    }
    Ok((frames, keys))
}

/// The identity transform of `mvhd` and `tkhd`.
const MATRIX: [u32; 9] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000];

fn matrix() -> Vec<u8> {
    MATRIX.iter().flat_map(|v| v.to_be_bytes()).collect()
}

impl Fmp4Writer {
    /// Encodes the first piece and returns the writer, the init segment and the first fragment.
    pub fn start(first: &VideoArtifact) -> Result<(Self, Vec<u8>, Vec<u8>)> {
        let mut enc = FrameEncoder::new(first.width, first.height, first.fps)?;
        let (frames, keys) = encode_piece(&mut enc, first)?;
        let (sps, pps) = enc.parameter_sets()?;
        let mut w = Self {
            enc,
            width: first.width,
            height: first.height,
            fps: first.fps.max(1),
            sps,
            pps,
            frames: 0,
            sequence: 0,
        };
        let init = w.init_segment();
        let fragment = w.fragment_of(&frames, &keys);
        w.frames += first.num_frames as u64;
        Ok((w, init, fragment))
    }

    /// The next piece as one fragment; its size and frame rate must be the first piece's.
    pub fn push(&mut self, piece: &VideoArtifact) -> Result<Vec<u8>> {
        ensure!(
            (piece.width, piece.height, piece.fps.max(1)) == (self.width, self.height, self.fps),
            "a fragment of {}x{} at {} fps in a {}x{} stream at {} fps",
            piece.width,
            piece.height,
            piece.fps,
            self.width,
            self.height,
            self.fps
        );
        let (frames, keys) = encode_piece(&mut self.enc, piece)?;
        ensure!(
            self.enc.parameter_sets()? == (self.sps.clone(), self.pps.clone()),
            "the parameter sets changed mid-stream"
        );
        let fragment = self.fragment_of(&frames, &keys);
        self.frames += piece.num_frames as u64;
        Ok(fragment)
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    fn init_segment(&self) -> Vec<u8> {
        let mut ftyp = b"isom".to_vec();
        ftyp.extend_from_slice(&512u32.to_be_bytes());
        for brand in [b"isom", b"iso5", b"iso6", b"avc1", b"mp41"] {
            ftyp.extend_from_slice(brand);
        }
        let mut mvhd = vec![0u8; 8]; // creation, modification
        mvhd.extend_from_slice(&1000u32.to_be_bytes()); // timescale
        mvhd.extend_from_slice(&0u32.to_be_bytes()); // duration: unknown (fragments)
        mvhd.extend_from_slice(&0x0001_0000u32.to_be_bytes()); // rate 1.0
        mvhd.extend_from_slice(&0x0100u16.to_be_bytes()); // volume 1.0
        mvhd.extend_from_slice(&[0; 10]);
        mvhd.extend(matrix());
        mvhd.extend_from_slice(&[0; 24]);
        mvhd.extend_from_slice(&2u32.to_be_bytes()); // next track id
        let mut tkhd = vec![0u8; 8];
        tkhd.extend_from_slice(&1u32.to_be_bytes()); // track id
        tkhd.extend_from_slice(&[0; 4]);
        tkhd.extend_from_slice(&0u32.to_be_bytes()); // duration
        tkhd.extend_from_slice(&[0; 8]);
        tkhd.extend_from_slice(&[0; 4]); // layer, alternate group
        tkhd.extend_from_slice(&[0; 4]); // volume, reserved
        tkhd.extend(matrix());
        tkhd.extend_from_slice(&(self.width << 16).to_be_bytes());
        tkhd.extend_from_slice(&(self.height << 16).to_be_bytes());
        let mut mdhd = vec![0u8; 8];
        mdhd.extend_from_slice(&self.fps.to_be_bytes()); // one tick per frame
        mdhd.extend_from_slice(&0u32.to_be_bytes());
        mdhd.extend_from_slice(&0x55c4u16.to_be_bytes()); // "und"
        mdhd.extend_from_slice(&[0; 2]);
        let mut hdlr = vec![0u8; 4];
        hdlr.extend_from_slice(b"vide");
        hdlr.extend_from_slice(&[0; 12]);
        hdlr.extend_from_slice(b"VideoHandler\0");
        let dref = full(b"dref", 0, 0, &[&1u32.to_be_bytes()[..], &full(b"url ", 0, 1, &[])].concat());
        let stbl = [
            full(b"stsd", 0, 0, &[&1u32.to_be_bytes()[..], &self.avc1()].concat()),
            full(b"stts", 0, 0, &0u32.to_be_bytes()),
            full(b"stsc", 0, 0, &0u32.to_be_bytes()),
            full(b"stsz", 0, 0, &[0u8; 8]),
            full(b"stco", 0, 0, &0u32.to_be_bytes()),
        ]
        .concat();
        let minf = [full(b"vmhd", 0, 1, &[0; 8]), boxed(b"dinf", &dref), boxed(b"stbl", &stbl)].concat();
        let mdia = [full(b"mdhd", 0, 0, &mdhd), full(b"hdlr", 0, 0, &hdlr), boxed(b"minf", &minf)].concat();
        let trak = [full(b"tkhd", 0, 3, &tkhd), boxed(b"mdia", &mdia)].concat();
        // Fragments' samples: description 1, one tick each, flags given per sample.
        let trex: Vec<u8> = [1u32, 1, 1, 0, 0].iter().flat_map(|v| v.to_be_bytes()).collect();
        let moov =
            [full(b"mvhd", 0, 0, &mvhd), boxed(b"trak", &trak), boxed(b"mvex", &full(b"trex", 0, 0, &trex))].concat();
        [boxed(b"ftyp", &ftyp), boxed(b"moov", &moov)].concat()
    }

    /// The `avc1` sample entry with its `avcC` (4-byte NAL lengths, one SPS, one PPS).
    fn avc1(&self) -> Vec<u8> {
        let (sps, pps) = (&self.sps, &self.pps);
        let mut avcc = vec![1, sps[1], sps[2], sps[3], 0xff, 0xe1];
        avcc.extend_from_slice(&(sps.len() as u16).to_be_bytes());
        avcc.extend_from_slice(sps);
        avcc.push(1);
        avcc.extend_from_slice(&(pps.len() as u16).to_be_bytes());
        avcc.extend_from_slice(pps);
        let mut e = vec![0u8; 6];
        e.extend_from_slice(&1u16.to_be_bytes()); // data reference index
        e.extend_from_slice(&[0; 16]);
        e.extend_from_slice(&(self.width as u16).to_be_bytes());
        e.extend_from_slice(&(self.height as u16).to_be_bytes());
        e.extend_from_slice(&0x0048_0000u32.to_be_bytes()); // 72 dpi
        e.extend_from_slice(&0x0048_0000u32.to_be_bytes());
        e.extend_from_slice(&[0; 4]);
        e.extend_from_slice(&1u16.to_be_bytes()); // frames per sample
        e.extend_from_slice(&[0; 32]); // compressor name
        e.extend_from_slice(&0x0018u16.to_be_bytes()); // depth
        e.extend_from_slice(&0xffffu16.to_be_bytes());
        e.extend(boxed(b"avcC", &avcc));
        boxed(b"avc1", &e)
    }

    fn fragment_of(&mut self, frames: &[Vec<Vec<u8>>], keyframes: &[bool]) -> Vec<u8> {
        self.sequence += 1;
        // Samples as MP4 stores them: NAL units behind 4-byte big-endian lengths.
        let samples: Vec<Vec<u8>> = frames
            .iter()
            .map(|nals| nals.iter().flat_map(|n| [&(n.len() as u32).to_be_bytes()[..], n].concat()).collect())
            .collect();
        let trun_len = 8 + 4 + 4 + 4 + samples.len() * 12;
        let tfhd_len = 8 + 4 + 4;
        let tfdt_len = 8 + 4 + 8;
        let traf_len = 8 + tfhd_len + tfdt_len + trun_len;
        let moof_len = 8 + (8 + 4 + 4) + traf_len;
        // trun: data offset, and each sample's duration, size and flags.
        let mut trun = (samples.len() as u32).to_be_bytes().to_vec();
        trun.extend_from_slice(&(moof_len as u32 + 8).to_be_bytes()); // to the first byte of mdat's data
        for (s, &key) in samples.iter().zip(keyframes) {
            trun.extend_from_slice(&1u32.to_be_bytes());
            trun.extend_from_slice(&(s.len() as u32).to_be_bytes());
            // A sync sample depends on nothing; the others on earlier ones and are not sync.
            trun.extend_from_slice(&(if key { 0x0200_0000u32 } else { 0x0101_0000 }).to_be_bytes());
        }
        let traf = [
            full(b"tfhd", 0, 0x02_0000, &1u32.to_be_bytes()), // default-base-is-moof
            full(b"tfdt", 1, 0, &self.frames.to_be_bytes()),
            full(b"trun", 0, 0x000001 | 0x000100 | 0x000200 | 0x000400, &trun),
        ]
        .concat();
        let moof = [full(b"mfhd", 0, 0, &self.sequence.to_be_bytes()), boxed(b"traf", &traf)].concat();
        let moof = boxed(b"moof", &moof);
        debug_assert_eq!(moof.len(), moof_len);
        [moof, boxed(b"mdat", &samples.concat())].concat()
    }
}
