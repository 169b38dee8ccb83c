//! The pictures and videos a run reads: files in ComfyUI's input folder (what `/upload/image`
//! writes), named by `LoadImage` / `LoadVideo`, with the resize steps between the loader and
//! where the workflow uses them. Reading one decodes and checks it, applies the steps, and
//! gives the request input that carries it; every failure names the loader node and its input,
//! as ComfyUI's validation does, before any model work.

use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use serde::Serialize;

use fastvideo_request::{decode_image, decode_video, ImageRole, InputImage, InputPart};

use crate::resize::Resize;
use crate::CompileError;

/// A picture a run conditions on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImagePlan {
    /// First frame or last frame.
    pub role: ImageRole,
    /// The `LoadImage` node.
    pub node: String,
    /// Its `image` value: a file in the input folder (`name.png`, `sub/name.png`, or ComfyUI's
    /// annotated `name.png [input]`).
    pub file: String,
    /// The steps from the file to the request, in order.
    pub resize: Vec<Resize>,
}

/// The video a video-to-video run starts from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VideoPlan {
    /// The `LoadVideo` node.
    pub node: String,
    /// Its `file` value, as for [`ImagePlan::file`].
    pub file: String,
    /// Resize steps on its frames: they set the request's size (the pipeline scales the frames).
    pub resize: Vec<Resize>,
}

/// A video read for a request: the input and what the run takes from it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedVideo {
    /// The request input (the MP4 as given).
    pub part: InputPart,
    /// The size the frames are scaled to.
    pub width: u32,
    /// The size the frames are scaled to.
    pub height: u32,
    /// Frames per second the file declares (0 when it declares none).
    pub fps: f64,
}

/// `file` under the input folder `inputs`. A file name that leaves the folder, or ComfyUI's
/// annotation for another folder (`[output]`, `[temp]`), is refused.
pub fn input_path(inputs: &Path, file: &str) -> Result<PathBuf, String> {
    let name = match file.trim_end().rsplit_once(" [") {
        Some((name, "input]")) => name,
        Some((_, other)) if other.ends_with(']') => {
            return Err(format!("`{file}`: only files of the input folder can be loaded"));
        }
        _ => file,
    };
    let rel = Path::new(name);
    if name.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!("`{file}` is not a file name inside the input folder"));
    }
    Ok(inputs.join(rel))
}

/// Reads `file` for loader `node`'s `input`; a missing file says so as ComfyUI does.
fn read(inputs: &Path, node: &str, input: &str, file: &str, kind: &str) -> Result<Vec<u8>, CompileError> {
    let path = input_path(inputs, file).map_err(|m| CompileError::input(node, input, m))?;
    std::fs::read(&path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "not in the input folder".to_string(),
            _ => e.to_string(),
        };
        CompileError::input(node, input, format!("Invalid {kind} file: {file} ({why})"))
    })
}

fn png_b64(image: &InputImage) -> Result<String, String> {
    let mut out = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_raw(image.width, image.height, image.rgb.clone())
        .ok_or("a resized picture of the wrong length")?
        .write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    Ok(base64::engine::general_purpose::STANDARD.encode(out.into_inner()))
}

impl ImagePlan {
    /// Decodes the file, applies the steps and gives the request input (a lossless PNG).
    pub fn load(&self, inputs: &Path) -> Result<InputPart, CompileError> {
        Ok(self.load_sized(inputs)?.0)
    }

    /// [`load`](Self::load), with the picture's size after the resize steps.
    pub fn load_sized(&self, inputs: &Path) -> Result<(InputPart, (u32, u32)), CompileError> {
        let bytes = read(inputs, &self.node, "image", &self.file, "image")?;
        let mut image = decode_image(&bytes, self.role, "image").map_err(|e| {
            CompileError::input(&self.node, "image", format!("Invalid image file: {}: {}", self.file, e.rule))
        })?;
        for step in &self.resize {
            image = step.apply(&image).map_err(|m| CompileError::node(&step.node, m))?;
        }
        let b64 = png_b64(&image).map_err(|m| CompileError::input(&self.node, "image", m))?;
        Ok((InputPart::Image { path: None, b64: Some(b64), role: self.role }, (image.width, image.height)))
    }
}

impl VideoPlan {
    /// Decodes the file (so a bad one is refused here) and works out the size its frames take.
    /// A step that would crop frames to another aspect is refused: the pipeline scales frames
    /// to the request's size and does not cut them.
    pub fn load(&self, inputs: &Path) -> Result<LoadedVideo, CompileError> {
        let bytes = read(inputs, &self.node, "file", &self.file, "video")?;
        let video = decode_video(&bytes, "file").map_err(|e| {
            CompileError::input(&self.node, "file", format!("Invalid video file: {}: {}", self.file, e.rule))
        })?;
        let (mut w, mut h) = (video.width, video.height);
        for step in &self.resize {
            if step.crops(w, h).map_err(|m| CompileError::node(&step.node, m))? {
                let msg = format!(
                    "cropping the video's {w}x{h} frames to another aspect is not supported (frames are scaled, not cut); set crop to disabled"
                );
                return Err(CompileError::node(&step.node, msg));
            }
            (w, h) = step.size(w, h).map_err(|m| CompileError::node(&step.node, m))?;
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        Ok(LoadedVideo { part: InputPart::Video { path: None, b64: Some(b64) }, width: w, height: h, fps: video.fps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_files_stay_in_the_input_folder() {
        let base = Path::new("/srv/input");
        assert_eq!(input_path(base, "cat.png").unwrap(), Path::new("/srv/input/cat.png"));
        assert_eq!(input_path(base, "pets/cat.png").unwrap(), Path::new("/srv/input/pets/cat.png"));
        assert_eq!(input_path(base, "cat.png [input]").unwrap(), Path::new("/srv/input/cat.png"));
        assert!(input_path(base, "cat.png [output]").unwrap_err().contains("only files of the input folder"));
        for bad in ["../cat.png", "/etc/passwd", "", "a/../../b"] {
            assert!(input_path(base, bad).is_err(), "{bad}");
        }
    }
}
