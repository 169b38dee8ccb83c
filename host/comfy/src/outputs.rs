//! Output file names the way ComfyUI makes them: `filename_prefix` may name a subfolder
//! (`video/ComfyUI`), files are `NAME_00001_.EXT` with a counter one past the highest already
//! in that folder, and nothing may land outside the output folder.

use std::path::{Component, Path, PathBuf};

/// Where one output goes, relative to the output folder (what `/view` takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputName {
    /// The subfolder (`video`; empty for none), `/`-separated.
    pub subfolder: String,
    /// The file name (`ComfyUI_00001_.mp4`).
    pub filename: String,
}

impl OutputName {
    /// The file's path under `root`.
    pub fn path(&self, root: &Path) -> PathBuf {
        root.join(&self.subfolder).join(&self.filename)
    }
}

/// The next free name for `prefix` and `ext` under `root`. A prefix that climbs out of the
/// output folder (`..`, an absolute path) is refused.
pub fn next_output(root: &Path, prefix: &str, ext: &str) -> Result<OutputName, String> {
    let prefix = if prefix.trim().is_empty() { "ComfyUI" } else { prefix.trim() };
    let (sub, name) = match prefix.rsplit_once('/') {
        Some((s, n)) => (s, n),
        None => ("", prefix),
    };
    let sub_path = Path::new(sub);
    if sub_path.components().any(|c| !matches!(c, Component::Normal(_))) || name.is_empty() || name.contains('\\') {
        return Err(format!("filename_prefix `{prefix}` must stay inside the output folder"));
    }
    let dir = root.join(sub_path);
    let start = format!("{name}_");
    let end = format!("_.{ext}");
    let highest = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_prefix(&start)?.strip_suffix(&end)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    Ok(OutputName { subfolder: sub.to_string(), filename: format!("{name}_{:05}_.{ext}", highest + 1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_continue_and_prefixes_stay_inside() {
        let root = std::env::temp_dir().join(format!("fastvideo-outputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let first = next_output(&root, "video/ComfyUI", "mp4").unwrap();
        assert_eq!((first.subfolder.as_str(), first.filename.as_str()), ("video", "ComfyUI_00001_.mp4"));
        std::fs::create_dir_all(root.join("video")).unwrap();
        std::fs::write(first.path(&root), b"x").unwrap();
        std::fs::write(root.join("video/ComfyUI_00007_.mp4"), b"x").unwrap();
        assert_eq!(next_output(&root, "video/ComfyUI", "mp4").unwrap().filename, "ComfyUI_00008_.mp4");
        assert_eq!(next_output(&root, "video/ComfyUI", "png").unwrap().filename, "ComfyUI_00001_.png");
        assert_eq!(next_output(&root, "", "png").unwrap().filename, "ComfyUI_00001_.png");
        for bad in ["../x", "/etc/x", "a/../../x"] {
            assert!(next_output(&root, bad, "mp4").unwrap_err().contains("inside the output folder"), "{bad}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
