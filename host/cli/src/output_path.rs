//! Where `generate` writes its files, checked before any model work.

use std::path::Path;

use anyhow::{bail, Result};

/// Checks the place an output (`flag`, e.g. `--out`) goes before any work, so a typo never
/// costs a generation; `example` is a file name to suggest.
pub fn check_output(path: &Path, flag: &str, example: &str) -> Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        bail!("{flag}: folder {} does not exist", parent.display());
    }
    if path.is_dir() {
        bail!("{flag}: {} is a folder; give a file name like {example}", path.display());
    }
    Ok(())
}
