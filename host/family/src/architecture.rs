//! What a folder says it is: diffusers folders name their pipeline class in `model_index.json`
//! (`_class_name`), transformers folders their model class in `config.json` (`architectures`).

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The architecture a folder declares, and the file that declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// The class name (`WanPipeline`, `Qwen3ForCausalLM`, …).
    pub name: String,
    /// `model_index.json` or `config.json`.
    pub file: &'static str,
}

/// Reads the architecture `dir` declares: `model_index.json`'s `_class_name` first, else the
/// first of `config.json`'s `architectures`, else its `model_type` (older transformers folders
/// carry only that). Errors name the folder and the file.
pub fn architecture_of(dir: &Path) -> Result<Architecture> {
    if !dir.is_dir() {
        bail!("model folder {} does not exist", dir.display());
    }
    for (file, read) in
        [("model_index.json", class_name as fn(&Value) -> Option<String>), ("config.json", architectures)]
    {
        let path = dir.join(file);
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let value: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let Some(name) = read(&value) else {
            bail!(
                "{}: names no architecture ({})",
                path.display(),
                if file == "model_index.json" { "`_class_name` is missing" } else { "`architectures` is missing" }
            );
        };
        return Ok(Architecture { name, file });
    }
    bail!(
        "{} is not a diffusers model folder (no model_index.json) nor a transformers one (no config.json)",
        dir.display()
    )
}

fn class_name(v: &Value) -> Option<String> {
    v.get("_class_name")?.as_str().map(str::to_string)
}

fn architectures(v: &Value) -> Option<String> {
    let listed = v.get("architectures").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str);
    listed.or_else(|| v.get("model_type")?.as_str()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_diffusers_then_transformers_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), r#"{"architectures": ["Qwen3ForCausalLM"]}"#).unwrap();
        let a = architecture_of(d.path()).unwrap();
        assert_eq!((a.name.as_str(), a.file), ("Qwen3ForCausalLM", "config.json"));
        // A pipeline folder's index wins over a config.json beside it.
        std::fs::write(d.path().join("model_index.json"), r#"{"_class_name": "WanPipeline"}"#).unwrap();
        assert_eq!(architecture_of(d.path()).unwrap().name, "WanPipeline");
        // A transformers folder naming only its model type.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join("config.json"), r#"{"model_type": "qwen3"}"#).unwrap();
        assert_eq!(architecture_of(old.path()).unwrap().name, "qwen3");
    }

    #[test]
    fn names_the_folder_and_the_file_at_fault() {
        let d = tempfile::tempdir().unwrap();
        let e = architecture_of(d.path()).unwrap_err().to_string();
        assert!(e.contains("is not a diffusers model folder (no model_index.json)"), "{e}");
        std::fs::write(d.path().join("model_index.json"), "{").unwrap();
        let e = format!("{:#}", architecture_of(d.path()).unwrap_err());
        assert!(e.contains("model_index.json: not valid JSON"), "{e}");
        std::fs::write(d.path().join("model_index.json"), "{}").unwrap();
        let e = architecture_of(d.path()).unwrap_err().to_string();
        assert!(e.contains("`_class_name` is missing"), "{e}");
        let e = architecture_of(&d.path().join("nope")).unwrap_err().to_string();
        assert!(e.starts_with("model folder") && e.ends_with("does not exist"), "{e}");
    }
}
