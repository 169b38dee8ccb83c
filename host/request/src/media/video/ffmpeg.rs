//! The decoder of builds with the `ffmpeg` feature: ffmpeg's libraries (libavformat's MOV and
//! Matroska demuxers, libavcodec's decoders, libswscale) through `ffmpeg-next`.
//!
//! Request bytes are untrusted, so ffmpeg sees them only through a reader over memory, with the
//! demuxer named from the sniffed container (no probing of its other formats), no protocol
//! allowed for nested opens (a demuxer that follows a reference finds nothing), five decoders,
//! and the decoder's own pixel limit set to ours. The stream info pass
//! (`avformat_find_stream_info`, which decodes frames to learn parameters) is skipped: MOV and
//! Matroska headers declare the size, so it is checked before any frame is decoded.

use std::io::Cursor;
use std::ptr;
use std::sync::Once;

use ffmpeg_next as av;

use av::codec::packet::side_data::Type as SideData;
use av::format::context::{Input, StreamIo};
use av::{ffi, Rational};

use super::orient::Orientation;
use super::{Container, Described, Frames, MAX_FRAME_PIXELS};
use crate::{InputVideo, RequestError};

/// The codecs decoded, with the names errors give them.
fn codec_name(id: av::codec::Id) -> Option<&'static str> {
    use av::codec::Id;
    match id {
        Id::H264 => Some("H.264"),
        Id::HEVC => Some("HEVC"),
        Id::VP8 => Some("VP8"),
        Id::VP9 => Some("VP9"),
        Id::AV1 => Some("AV1"),
        _ => None,
    }
}

/// What the header says about the chosen video stream, read before decoding.
struct Header {
    index: usize,
    described: Described,
    codec: Option<av::codec::Id>,
    fps: Option<f64>,
    time_base: Rational,
    orientation: Orientation,
}

pub(super) fn decode(bytes: &[u8], field: &str) -> Result<InputVideo, RequestError> {
    init();
    let err = |m: String| RequestError::new(field, m);
    let container = Container::sniff(bytes)
        .ok_or_else(|| err("not a readable MP4, MOV, WebM or Matroska file (no header of any)".into()))?;
    let mut input =
        open(bytes, container).map_err(|e| err(format!("not a readable {} file: {e}", container.name())))?;
    let header =
        header(&input, container).ok_or_else(|| err(format!("the {} file has no video track", container.name())))?;
    let described = &header.described;
    let fail = |m: String| described.error(field, m);
    let Some(id) = header.codec else {
        return Err(fail("only H.264, HEVC, VP8, VP9 and AV1 video is decoded".into()));
    };
    described.check_size(field)?;
    // Packets of the other streams (audio, cover art, timecode) are skipped by the demuxer.
    unsafe {
        let ctx = input.as_mut_ptr();
        for i in (0..(*ctx).nb_streams as usize).filter(|&i| i != header.index) {
            (**(*ctx).streams.add(i)).discard = ffi::AVDiscard::AVDISCARD_ALL;
        }
    }
    let stream = input.stream(header.index).expect("the stream just found");
    let mut codec = av::codec::Context::from_parameters(stream.parameters())
        .map_err(|e| fail(format!("the decoder does not take the track's parameters: {e}")))?;
    if av::decoder::find(id).is_none() {
        return Err(fail("this machine's ffmpeg has no decoder for it".into()));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    unsafe {
        let c = codec.as_mut_ptr();
        // ffmpeg refuses larger frames itself (a stream whose frames outgrow its header).
        (*c).max_pixels = MAX_FRAME_PIXELS as i64;
        (*c).thread_count = threads as i32;
        (*c).pkt_timebase = header.time_base.into();
    }
    let mut decoder = codec.decoder().video().map_err(|e| fail(format!("the decoder does not open: {e}")))?;

    let mut frames = Frames::new(header.fps.unwrap_or(0.0));
    let mut convert = Converter::new(header.orientation);
    let mut stamps = Stamps::default();
    let mut n = 0usize;
    while !frames.full() {
        // A fresh packet each time: reading into a used one would not release its buffer.
        let mut packet = av::Packet::empty();
        match packet.read(&mut input) {
            Ok(()) => {}
            Err(av::Error::Eof) => break,
            Err(e) => return Err(fail(format!("the file does not read past packet {n}: {e}"))),
        }
        if packet.stream() != header.index {
            continue;
        }
        if packet.is_corrupt() {
            return Err(fail(format!("packet {n} is cut short or damaged")));
        }
        decoder.send_packet(&packet).map_err(|e| fail(format!("packet {n} does not decode: {e}")))?;
        drain(&mut decoder, &mut convert, &mut frames, &mut stamps).map_err(fail)?;
        n += 1;
    }
    if !frames.full() {
        decoder.send_eof().map_err(|e| fail(format!("the last frames do not decode: {e}")))?;
        drain(&mut decoder, &mut convert, &mut frames, &mut stamps).map_err(fail)?;
    }
    let mut video = frames.finish().map_err(fail)?;
    if header.fps.is_none() {
        video.fps = stamps.fps(header.time_base, video.frames);
    }
    Ok(video)
}

/// Once per process: `ffmpeg-next`'s error texts (filled in by its `init`), and no logging
/// (ffmpeg logs to stderr by default; its failures come back as errors instead).
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // It only fills tables on ffmpeg 5 and later, and cannot fail.
        let _ = av::init();
        unsafe { ffi::av_log_set_level(ffi::AV_LOG_QUIET) }
    });
}

/// Opens `bytes` with the demuxer of `container` and nothing else.
fn open(bytes: &[u8], container: Container) -> Result<Input, av::Error> {
    let mut io = StreamIo::from_read_seek(Cursor::new(bytes.to_vec()))?;
    let demuxer = match container {
        Container::Mp4 | Container::Mov => c"mov",
        Container::WebM | Container::Matroska => c"matroska",
    };
    let mut options = av::Dictionary::new();
    options.set("format_whitelist", "mov,matroska");
    // No protocol at all for anything a demuxer would open besides this file.
    options.set("protocol_whitelist", "none");
    unsafe {
        let format = ffi::av_find_input_format(demuxer.as_ptr());
        if format.is_null() {
            return Err(av::Error::DemuxerNotFound);
        }
        let mut ctx = ffi::avformat_alloc_context();
        if ctx.is_null() {
            return Err(av::Error::Other { errno: av::util::error::ENOMEM });
        }
        (*ctx).pb = io.as_mut_ptr();
        (*ctx).flags |= ffi::AVFMT_FLAG_CUSTOM_IO;
        let mut options = options.disown();
        // On failure this frees `ctx` (not the reader, which `io` owns).
        let r = ffi::avformat_open_input(&mut ctx, ptr::null(), format, &mut options);
        drop(av::Dictionary::own(options));
        if r < 0 {
            return Err(av::Error::from(r));
        }
        Ok(Input::wrap_with_custom_io(ctx, io))
    }
}

/// The first video stream that is not cover art, as its header describes it.
fn header(input: &Input, container: Container) -> Option<Header> {
    let stream = input.streams().find(|s| {
        s.parameters().medium() == av::media::Type::Video
            && !s.disposition().contains(av::format::stream::Disposition::ATTACHED_PIC)
    })?;
    let params = stream.parameters();
    let id = params.id();
    let (width, height, profile) = unsafe {
        let p = params.as_ptr();
        ((*p).width.max(0) as u32, (*p).height.max(0) as u32, (*p).profile)
    };
    let mut codec = codec_name(id).map_or_else(|| id.name().to_string(), str::to_string);
    if matches!(id, av::codec::Id::H264 | av::codec::Id::HEVC) {
        let name = unsafe { ffi::avcodec_profile_name(id.into(), profile) };
        if !name.is_null() {
            codec = format!("{codec} {}", unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy());
        }
    }
    let frames = Some(stream.frames()).filter(|&n| n > 0).map(|n| n as u64);
    let rate = |r: Rational| (r.numerator() > 0 && r.denominator() > 0).then(|| f64::from(r));
    let fps = rate(stream.avg_frame_rate()).or_else(|| rate(stream.rate()));
    Some(Header {
        index: stream.index(),
        described: Described { codec, container, width, height, frames },
        codec: codec_name(id).map(|_| id),
        fps,
        time_base: stream.time_base(),
        orientation: orientation(&stream),
    })
}

/// The stream's display matrix (what phones write), else an old-style `rotate` tag.
fn orientation(stream: &av::format::stream::Stream) -> Orientation {
    let matrix = stream.side_data().find(|s| s.kind() == SideData::DisplayMatrix).and_then(|s| {
        // Nine `i32`s in the machine's byte order.
        let d = s.data().get(..36)?;
        let mut m = [0i32; 9];
        for (v, b) in m.iter_mut().zip(d.chunks_exact(4)) {
            *v = i32::from_ne_bytes(b.try_into().expect("4 bytes"));
        }
        Some(m)
    });
    match matrix {
        Some(m) => Orientation::from_matrix(&m).unwrap_or(Orientation::UPRIGHT),
        None => stream.metadata().get("rotate").and_then(Orientation::from_rotate_tag).unwrap_or(Orientation::UPRIGHT),
    }
}

/// Every frame the decoder has ready, converted and kept (until the limit).
fn drain(
    decoder: &mut av::decoder::Video,
    convert: &mut Converter,
    frames: &mut Frames,
    stamps: &mut Stamps,
) -> Result<(), String> {
    let mut frame = av::frame::Video::empty();
    while !frames.full() {
        match decoder.receive_frame(&mut frame) {
            Ok(()) => {}
            Err(av::Error::Eof) => break,
            Err(av::Error::Other { errno }) if errno == av::util::error::EAGAIN => break,
            Err(e) => return Err(format!("frame {} does not decode: {e}", frames.out.frames)),
        }
        stamps.see(frame.timestamp());
        let (w, h, rgb) = convert.run(&frame).map_err(|e| format!("frame {}: {e}", frames.out.frames))?;
        frames.push(w, h, rgb)?;
    }
    Ok(())
}

/// Decoded pictures (any pixel format, 8 or 10 bits) to upright RGB8, with the colour matrix
/// and range each frame declares (BT.601 when it declares none, as ffmpeg assumes).
struct Converter {
    orientation: Orientation,
    /// The scaler and what it was made for: pixel format, size, colour space, full range.
    scaler: Option<(ScalerFor, av::software::scaling::Context)>,
    rgb: av::frame::Video,
    packed: Vec<u8>,
    turned: Vec<u8>,
}

type ScalerFor = (av::format::Pixel, u32, u32, i32, bool);

impl Converter {
    fn new(orientation: Orientation) -> Self {
        Converter { orientation, scaler: None, rgb: av::frame::Video::empty(), packed: Vec::new(), turned: Vec::new() }
    }

    fn run(&mut self, frame: &av::frame::Video) -> Result<(u32, u32, &[u8]), String> {
        let (format, w, h) = (frame.format(), frame.width(), frame.height());
        if format == av::format::Pixel::None || w == 0 || h == 0 {
            return Err("the decoder gave an empty picture".into());
        }
        let wanted = (format, w, h, colour_space(frame), full_range(frame));
        if !matches!(&self.scaler, Some((made_for, _)) if *made_for == wanted) {
            use av::software::scaling::Flags;
            // Chroma upsampled by nearest neighbour: files place 4:2:0 chroma differently (ours,
            // from openh264, at the centre of each 2×2; H.264's default, at the left), and the
            // bilinear filter, which assumes one placement, scored 28 dB against 34.7 dB on
            // host/media's round trip of our own MP4s (the same within a level on make.sh's).
            let flags = Flags::POINT | Flags::ACCURATE_RND | Flags::FULL_CHR_H_INT | Flags::FULL_CHR_H_INP;
            let mut scaler = av::software::scaling::Context::get(format, w, h, av::format::Pixel::RGB24, w, h, flags)
                .map_err(|e| format!("no conversion from {format:?} to RGB: {e}"))?;
            set_colours(&mut scaler, wanted.3, wanted.4);
            self.scaler = Some((wanted, scaler));
            self.rgb = av::frame::Video::empty();
        }
        let (_, scaler) = self.scaler.as_mut().expect("set above");
        scaler.run(frame, &mut self.rgb).map_err(|e| format!("the conversion to RGB failed: {e}"))?;
        let (row, stride) = (w as usize * 3, self.rgb.stride(0));
        self.packed.clear();
        for line in self.rgb.data(0).chunks(stride).take(h as usize) {
            self.packed.extend_from_slice(&line[..row]);
        }
        self.orientation.apply(&self.packed, w, h, &mut self.turned);
        let (tw, th) = self.orientation.size(w, h);
        Ok((tw, th, &self.turned))
    }
}

/// The frame's colour-space number (`AVColorSpace`), which `sws_getCoefficients` takes; it
/// falls back to BT.601 for unspecified or unknown ones, as ffmpeg assumes.
fn colour_space(frame: &av::frame::Video) -> i32 {
    unsafe { (*frame.as_ptr()).colorspace as i32 }
}

fn full_range(frame: &av::frame::Video) -> bool {
    use av::format::Pixel;
    frame.color_range() == av::color::Range::JPEG
        || matches!(frame.format(), Pixel::YUVJ420P | Pixel::YUVJ422P | Pixel::YUVJ444P | Pixel::YUVJ440P)
}

/// Tells the scaler the YUV matrix and range it reads (RGB out is full range).
fn set_colours(scaler: &mut av::software::scaling::Context, space: i32, full: bool) {
    unsafe {
        let from = ffi::sws_getCoefficients(space);
        let to = ffi::sws_getCoefficients(ffi::SWS_CS_DEFAULT);
        // RGB input has no matrix: the call fails harmlessly then.
        ffi::sws_setColorspaceDetails(scaler.as_mut_ptr(), from, full as i32, to, 1, 0, 1 << 16, 1 << 16);
    }
}

/// First and last timestamps seen, for a frame rate when the header declares none.
#[derive(Default)]
struct Stamps {
    first: Option<i64>,
    last: Option<i64>,
}

impl Stamps {
    fn see(&mut self, t: Option<i64>) {
        if let Some(t) = t {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }

    fn fps(&self, time_base: Rational, frames: u32) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) if b > a && frames > 1 && time_base.numerator() > 0 => {
                (frames - 1) as f64 / ((b - a) as f64 * f64::from(time_base))
            }
            _ => 0.0,
        }
    }
}
