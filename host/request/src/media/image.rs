//! Pictures: PNG, JPEG and WebP into RGB8, checked before they are decoded.

use super::{ImageRole, InputImage};
use crate::RequestError;

mod complete;

/// Pictures declaring more pixels than this are refused before decoding (decompression bombs).
pub const MAX_IMAGE_PIXELS: u64 = 50_000_000;

/// Decodes a PNG, JPEG or WebP picture into RGB8, checking it before any pixel is decoded: the
/// format, that the file is whole (decoders fill a cut file's missing part), the declared size
/// against [`MAX_IMAGE_PIXELS`], and animation (refused: which frame to use is the caller's
/// choice). 16-bit and alpha pictures are converted (16 → 8 bits per channel by rounding, alpha
/// dropped, as PIL's `convert("RGB")` does). `field` names the input in every error.
pub fn decode_image(bytes: &[u8], role: ImageRole, field: &str) -> Result<InputImage, RequestError> {
    use image::{ImageFormat, ImageReader};
    use std::io::Cursor;
    let err = |m: String| RequestError::new(field, m);
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| err(format!("cannot read the image: {e}")))?;
    let format = match reader.format() {
        Some(f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP)) => f,
        Some(other) => {
            return Err(err(format!("{other:?} pictures are not supported (PNG, JPEG or WebP)")));
        }
        None => return Err(err("not an image (PNG, JPEG or WebP expected)".into())),
    };
    complete::check_complete(format, bytes).map_err(err)?;
    let (w, h) = reader.into_dimensions().map_err(|e| err(format!("not a readable {format:?} image: {e}")))?;
    let pixels = w as u64 * h as u64;
    if pixels == 0 {
        return Err(err(format!("the image is {w}x{h}: empty")));
    }
    if pixels > MAX_IMAGE_PIXELS {
        return Err(err(format!(
            "the image declares {w}x{h} = {:.1} megapixels, more than the {} accepted",
            pixels as f64 / 1e6,
            MAX_IMAGE_PIXELS / 1_000_000
        )));
    }
    let animated = match format {
        ImageFormat::Png => image::codecs::png::PngDecoder::new(Cursor::new(bytes))
            .and_then(|d| d.is_apng())
            .map_err(|e| err(format!("not a readable PNG image: {e}")))?,
        ImageFormat::WebP => image::codecs::webp::WebPDecoder::new(Cursor::new(bytes))
            .map(|d| d.has_animation())
            .map_err(|e| err(format!("not a readable WebP image: {e}")))?,
        _ => false,
    };
    if animated {
        return Err(err(format!(
            "animated {format:?} images are refused: give one frame as a still PNG, JPEG or WebP"
        )));
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_IMAGE_PIXELS * 8 + (64 << 20));
    reader.limits(limits);
    let decoded = reader.decode().map_err(|e| err(format!("not a readable {format:?} image: {e}")))?;
    let rgb = decoded.to_rgb8();
    Ok(InputImage { role, width: w, height: h, rgb: rgb.into_raw() })
}

/// The bytes of an image input: the file at `path`, or `b64` (plain base64 or a `data:` URL).
pub fn image_bytes(path: Option<&str>, b64: Option<&str>, field: &str) -> Result<Vec<u8>, RequestError> {
    use base64::Engine as _;
    match (path, b64) {
        (Some(p), None) => {
            std::fs::read(p).map_err(|e| RequestError::new(format!("{field}.path"), format!("cannot read {p}: {e}")))
        }
        (None, Some(b)) => {
            let data = match b.strip_prefix("data:") {
                Some(url) => url.split_once(";base64,").map(|(_, d)| d).ok_or_else(|| {
                    RequestError::new(format!("{field}.b64"), "a data: URL must be base64 (data:<type>;base64,...)")
                })?,
                None => b,
            };
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| RequestError::new(format!("{field}.b64"), format!("not valid base64: {e}")))
        }
        (Some(_), Some(_)) => Err(RequestError::new(field, "give `path` or `b64`, not both")),
        (None, None) => Err(RequestError::new(field, "give the picture as `path` or `b64`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::path::Path;

    fn png(img: image::DynamicImage) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
        }
        !c
    }

    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        let body = [kind.as_slice(), data].concat();
        c.extend(&body);
        c.extend(crc32(&body).to_be_bytes());
        c
    }

    #[test]
    fn a_png_decodes_to_rgb8_with_alpha_dropped() {
        let img = image::RgbaImage::from_fn(3, 2, |x, y| image::Rgba([x as u8 * 10, y as u8 * 20, 7, 9]));
        let out = decode_image(&png(img.into()), ImageRole::LastFrame, "inputs[1]").unwrap();
        assert_eq!((out.width, out.height, out.role), (3, 2, ImageRole::LastFrame));
        assert_eq!(&out.rgb[..6], &[0, 0, 7, 10, 0, 7]);
        assert_eq!(&out.rgb[9..12], &[0, 20, 7]);
    }

    #[test]
    fn sixteen_bit_pictures_are_converted_to_eight() {
        let img = image::ImageBuffer::<image::Rgb<u16>, _>::from_fn(1, 1, |_, _| image::Rgb([65535, 32896, 0]));
        let out = decode_image(&png(image::DynamicImage::ImageRgb16(img)), ImageRole::FirstFrame, "f").unwrap();
        assert_eq!(out.rgb, vec![255, 128, 0]);
    }

    #[test]
    fn bad_pictures_are_refused_naming_the_field() {
        let e = decode_image(b"hello, not a picture", ImageRole::FirstFrame, "inputs[2]").unwrap_err();
        assert_eq!(e.field, "inputs[2]");
        assert!(e.to_string().contains("not an image"), "{e}");
        let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
        let e = decode_image(gif, ImageRole::FirstFrame, "inputs[0]").unwrap_err();
        assert!(e.to_string().contains("Gif pictures are not supported"), "{e}");
        let mut truncated = png(image::RgbImage::new(4, 4).into());
        truncated.truncate(40);
        assert!(decode_image(&truncated, ImageRole::FirstFrame, "x").is_err());
    }

    /// A 32x24 picture with detail in every block, so every cut loses pixels.
    fn textured() -> image::DynamicImage {
        image::RgbImage::from_fn(32, 24, |x, y| image::Rgb([(x * 8) as u8, (y * 10) as u8, ((x * y) % 251) as u8]))
            .into()
    }

    fn encoded(img: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    /// The file decodes whole (and with bytes after its end), and every shorter prefix is refused
    /// naming the field, saying it was cut short once the format is recognised.
    fn every_cut_is_refused(name: &str, file: &[u8]) {
        let whole = decode_image(file, ImageRole::FirstFrame, "input_reference").unwrap();
        assert_eq!((whole.width, whole.height), (32, 24), "{name}");
        let trailing = [file, b"trailing bytes".as_slice()].concat();
        assert!(decode_image(&trailing, ImageRole::FirstFrame, "f").is_ok(), "{name} with bytes after its end");
        for n in 1..file.len() {
            let e = decode_image(&file[..n], ImageRole::FirstFrame, "input_reference")
                .expect_err(&format!("{name} cut to {n} of {} bytes was accepted", file.len()));
            assert_eq!(e.field, "input_reference");
            assert!(n < 16 || e.rule.contains("cut short"), "{name} cut to {n}: {e}");
        }
    }

    #[test]
    fn truncated_pictures_are_refused_in_every_format() {
        // Issue 54: a truncated JPEG decoded (zune-jpeg fills the missing blocks) and ran.
        let img = textured();
        for format in [image::ImageFormat::Png, image::ImageFormat::Jpeg, image::ImageFormat::WebP] {
            every_cut_is_refused(&format!("{format:?} from the image crate"), &encoded(&img, format));
        }
        // Files from PIL (libjpeg, libwebp; tests/fixtures/make_picture_fixtures.py): a
        // progressive JPEG's scans are separated by tables, a lossy WebP is a VP8 chunk.
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pictures");
        for name in ["pil-baseline.jpg", "pil-progressive.jpg", "pil-lossy.webp"] {
            every_cut_is_refused(name, &std::fs::read(fixtures.join(name)).unwrap());
        }
    }

    #[test]
    fn a_jpeg_is_whole_by_its_own_end_marker_not_a_thumbnails() {
        // A thumbnail (a whole JPEG, end marker included) in an APP1 segment before the picture:
        // the picture cut short is still refused.
        let main = encoded(&textured(), image::ImageFormat::Jpeg);
        let thumb = encoded(&image::RgbImage::new(4, 4).into(), image::ImageFormat::Jpeg);
        let mut app1 = vec![0xff, 0xe1];
        app1.extend(((thumb.len() + 2 + 6) as u16).to_be_bytes());
        app1.extend(b"Exif\0\0");
        app1.extend(&thumb);
        let file = [&main[..2], &app1, &main[2..]].concat();
        assert!(decode_image(&file, ImageRole::FirstFrame, "f").is_ok());
        let e = decode_image(&file[..file.len() - 40], ImageRole::FirstFrame, "last_frame").unwrap_err();
        assert_eq!(e.field, "last_frame");
        assert!(e.rule.contains("cut short (inside its image data)"), "{e}");
    }

    #[test]
    fn a_decompression_bomb_is_refused_from_its_header() {
        // A valid 1x1 PNG whose IHDR is rewritten to declare 10000x10000 (100 megapixels).
        let mut p = png(image::RgbImage::new(1, 1).into());
        let ihdr = 8; // after the signature: length, "IHDR", data (13 bytes), crc
        p[ihdr + 8..ihdr + 12].copy_from_slice(&10_000u32.to_be_bytes());
        p[ihdr + 12..ihdr + 16].copy_from_slice(&10_000u32.to_be_bytes());
        let crc = crc32(&p[ihdr + 4..ihdr + 21]);
        p[ihdr + 21..ihdr + 25].copy_from_slice(&crc.to_be_bytes());
        let e = decode_image(&p, ImageRole::FirstFrame, "inputs[0]").unwrap_err();
        assert!(e.to_string().contains("100.0 megapixels"), "{e}");
    }

    #[test]
    fn an_animated_png_is_refused() {
        let p = png(image::RgbImage::new(2, 2).into());
        // acTL (1 frame, loop forever) before the image data makes it an APNG.
        let ihdr_end = 8 + 25;
        let actl = chunk(b"acTL", &[0, 0, 0, 1, 0, 0, 0, 0]);
        let apng = [&p[..ihdr_end], &actl, &p[ihdr_end..]].concat();
        let e = decode_image(&apng, ImageRole::FirstFrame, "inputs[0]").unwrap_err();
        assert!(e.to_string().contains("animated Png images are refused"), "{e}");
    }

    #[test]
    fn image_bytes_take_a_path_or_base64_or_a_data_url() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"abc");
        assert_eq!(image_bytes(None, Some(&b64), "f").unwrap(), b"abc");
        assert_eq!(image_bytes(None, Some(&format!("data:image/png;base64,{b64}")), "f").unwrap(), b"abc");
        assert_eq!(image_bytes(None, Some("%%%"), "inputs[0]").unwrap_err().field, "inputs[0].b64");
        assert_eq!(image_bytes(Some("/nonexistent/x.png"), None, "inputs[0]").unwrap_err().field, "inputs[0].path");
        assert!(image_bytes(Some("a"), Some("b"), "f").is_err());
        assert!(image_bytes(None, None, "f").is_err());
    }
}
