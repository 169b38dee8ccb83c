use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fastvideo_request::VideoArtifact;

/// One frame as PNG bytes.
pub fn png_bytes(video: &VideoArtifact, frame: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, video.width, video.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().context("PNG header")?;
    w.write_image_data(video.frame(frame)).context("PNG data")?;
    w.finish().context("PNG end")?;
    Ok(out)
}

/// Writes `dir/frame_0000.png` ... and returns the paths.
pub fn write_pngs(video: &VideoArtifact, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    (0..video.num_frames as usize)
        .map(|i| {
            let p = dir.join(format!("frame_{i:04}.png"));
            std::fs::write(&p, png_bytes(video, i)?).with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}
