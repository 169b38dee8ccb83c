//! Whether a picture's file is whole. Decoders make up what a cut file lacks (zune-jpeg fills the
//! missing blocks, a lossy WebP's last bytes read as zeros), so a truncated upload would decode
//! into a partly grey picture and run; each format's own structure says where the file must end.

use image::ImageFormat;

/// `Ok` when `bytes` of `format` reach their format's end marker: PNG's `IEND` chunk, JPEG's
/// end-of-image marker, the size a WebP's RIFF header declares. Bytes after that are allowed
/// (some tools append data). The error says, in words, where the file stops.
pub(super) fn check_complete(format: ImageFormat, bytes: &[u8]) -> Result<(), String> {
    match format {
        ImageFormat::Png => png(bytes),
        ImageFormat::Jpeg => jpeg(bytes),
        ImageFormat::WebP => webp(bytes),
        _ => Ok(()),
    }
}

fn cut(format: &str, what: &str) -> String {
    format!("the {format} file is cut short ({what}): a truncated upload?")
}

/// Chunks after the 8-byte signature, each length, type, data and CRC, up to `IEND`.
fn png(b: &[u8]) -> Result<(), String> {
    let mut at = 8usize;
    loop {
        let Some(head) = b.get(at..at + 8) else {
            return Err(cut("PNG", "it ends before its IEND chunk"));
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = String::from_utf8_lossy(&head[4..8]).into_owned();
        let end = at.saturating_add(12).saturating_add(len);
        if end > b.len() {
            return Err(cut("PNG", &format!("inside its `{kind}` chunk")));
        }
        if kind == "IEND" {
            return Ok(());
        }
        at = end;
    }
}

/// `RIFF`, the size of what follows, `WEBP`, then chunks (four-character code, size, data, a
/// pad byte to even), all inside the declared size.
fn webp(b: &[u8]) -> Result<(), String> {
    let Some(size) = b.get(4..8) else { return Err(cut("WebP", "inside its RIFF header")) };
    let declared = (u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize).saturating_add(8);
    if declared > b.len() {
        return Err(cut("WebP", &format!("{} of the {declared} bytes its header declares", b.len())));
    }
    let body = b.get(12..declared).unwrap_or_default();
    let mut at = 0usize;
    while at < body.len() {
        let Some(head) = body.get(at..at + 8) else { return Err(cut("WebP", "inside a chunk header")) };
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let end = at.saturating_add(8).saturating_add(len);
        if end > body.len() {
            return Err(cut("WebP", &format!("inside its `{}` chunk", String::from_utf8_lossy(&head[..4]))));
        }
        at = end + (len & 1);
    }
    Ok(())
}

/// Segments from the start-of-image marker to the end-of-image one. Each marker segment carries
/// its length; a scan's entropy-coded data runs to the next marker that is neither a stuffed
/// `FF 00` nor a restart marker. An embedded thumbnail's end marker sits inside its segment, so
/// it is skipped with it, never taken for the picture's.
fn jpeg(b: &[u8]) -> Result<(), String> {
    const EOI: u8 = 0xd9;
    const SOS: u8 = 0xda;
    let standalone = |m: u8| matches!(m, 0x01 | 0xd0..=0xd8);
    let mut at = 2usize; // after SOI (the format guess saw it)
    loop {
        // A marker: 0xFF, any fill 0xFF bytes, then the code.
        if b.get(at) != Some(&0xff) {
            return match b.get(at) {
                None => Err(cut("JPEG", "it ends before its end-of-image marker")),
                Some(x) => Err(format!("not a readable JPEG image: byte {x:#04x} at {at} where a marker belongs")),
            };
        }
        while b.get(at) == Some(&0xff) {
            at += 1;
        }
        let Some(&marker) = b.get(at) else { return Err(cut("JPEG", "it ends inside a marker")) };
        at += 1;
        if marker == EOI {
            return Ok(());
        }
        if standalone(marker) {
            continue;
        }
        let Some(len) = b.get(at..at + 2).map(|l| u16::from_be_bytes([l[0], l[1]]) as usize) else {
            return Err(cut("JPEG", &format!("inside the header of a {marker:#04x} segment")));
        };
        if at + len > b.len() {
            return Err(cut("JPEG", &format!("inside a {marker:#04x} segment")));
        }
        at += len.max(2);
        if marker == SOS {
            // Entropy-coded data: 0xFF is followed by 0x00 (a stuffed byte), a restart marker, or
            // 0xFF (fill before a marker); anything else starts the next marker.
            loop {
                let Some(i) = b[at..].iter().position(|&x| x == 0xff) else {
                    return Err(cut("JPEG", "inside its image data"));
                };
                at += i;
                match b.get(at + 1) {
                    None => return Err(cut("JPEG", "inside its image data")),
                    Some(0x00 | 0xd0..=0xd7) => at += 2,
                    Some(_) => break,
                }
            }
        }
    }
}
