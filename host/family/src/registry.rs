//! [`Family`], the trait a family crate implements, and [`Registry`], the list of families a
//! runtime serves with the detection every `--model`, `[[models]]`, `[world]` and `[lm]` goes
//! through.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_lora::KeyMap;
use fastvideo_torch::Numerics;

use crate::architecture::{architecture_of, Architecture};
use crate::context::{LoadContext, ModelKind};
use crate::loaded::LoadedModel;
use crate::rewriter::PromptRewriter;

/// A model family: what it is called, what it serves, and how it loads.
pub trait Family: Send + Sync {
    /// Its name (`wan`, `wan-world`, `qwen`).
    fn name(&self) -> &'static str;

    /// The architectures it serves: diffusers pipeline classes or transformers model classes.
    fn architectures(&self) -> &'static [&'static str];

    /// The role it fills.
    fn kind(&self) -> ModelKind;

    /// Whether it serves `dir`, whose declared architecture is one of its own. Families that share
    /// an architecture tell their folders apart here (a world model is a Wan folder with
    /// `world.json`).
    fn accepts(&self, _dir: &Path) -> bool {
        true
    }

    /// What a precision preset implies for it on `device`: `fast` runs what its own quality
    /// gate admitted (the preset alone fixes only the dtypes).
    fn implies(&self, numerics: Numerics, _device: tch::Device) -> Numerics {
        numerics
    }

    /// Loads `dir`. Errors name the file (and for configs the key).
    fn load(&self, dir: &Path, ctx: &LoadContext) -> Result<Box<dyn LoadedModel>>;

    /// How its LoRA files' original-format and kohya names map to its modules, where its models
    /// take adapters (`fastvideo lora inspect` reads a file with it, before any model loads);
    /// `None`: they take none.
    fn lora_key_map(&self) -> Option<&'static dyn KeyMap> {
        None
    }

    /// Loads `dir` as a prompt rewriter on `device` (its language model and its optional
    /// system turn), where this family's models rewrite prompts; `None`: they do not.
    fn rewriter(&self, _dir: &Path, _device: tch::Device) -> Result<Option<Arc<dyn PromptRewriter>>> {
        Ok(None)
    }
}

impl std::fmt::Debug for dyn Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Family({})", self.name())
    }
}

/// The families a runtime serves, in the order they are tried.
pub struct Registry {
    families: Vec<&'static dyn Family>,
}

impl Registry {
    /// A registry of `families`.
    pub fn new(families: Vec<&'static dyn Family>) -> Self {
        Self { families }
    }

    /// Every family.
    pub fn families(&self) -> &[&'static dyn Family] {
        &self.families
    }

    /// The LoRA key maps of the families that take adapters, in registry order, each once
    /// (families that share a checkpoint layout share one).
    pub fn lora_key_maps(&self) -> Vec<&'static dyn KeyMap> {
        let mut maps: Vec<&'static dyn KeyMap> = Vec::new();
        for m in self.families.iter().filter_map(|f| f.lora_key_map()) {
            if !maps.iter().any(|k| k.family() == m.family()) {
                maps.push(m);
            }
        }
        maps
    }

    /// The family of `kind` serving `dir`, read from its `model_index.json` or `config.json`
    /// before any weights. None matching is an error naming the architecture found and the ones
    /// supported for that role (callers name the flag and the folder).
    pub fn detect(&self, dir: &Path, kind: ModelKind) -> Result<&'static dyn Family> {
        let arch = architecture_of(dir)?;
        let serving = |f: &dyn Family| f.architectures().contains(&arch.name.as_str()) && f.accepts(dir);
        if let Some(f) = self.families.iter().find(|f| f.kind() == kind && serving(**f)) {
            return Ok(*f);
        }
        Err(self.unsupported(dir, &arch, kind))
    }

    /// The error for a folder no family of `kind` serves.
    fn unsupported(&self, dir: &Path, arch: &Architecture, kind: ModelKind) -> anyhow::Error {
        let supported: Vec<String> = self
            .families
            .iter()
            .filter(|f| f.kind() == kind)
            .flat_map(|f| f.architectures().iter().map(move |a| format!("{a} ({})", f.name())))
            .collect();
        // A supported architecture in the wrong role says which role it fills.
        let other = self.families.iter().find(|f| f.architectures().contains(&arch.name.as_str()) && f.accepts(dir));
        let role = match other {
            Some(f) => format!(" here: it is {}, not {}", f.kind().describe(), kind.describe()),
            None => String::new(),
        };
        anyhow::anyhow!(
            "architecture `{}` ({}) is not served{role}; supported as {}: {}",
            arch.name,
            arch.file,
            kind.describe(),
            if supported.is_empty() { "none".to_string() } else { supported.join(", ") }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loaded::LoadedModel;

    struct Fake(&'static str, &'static [&'static str], ModelKind, &'static str);

    impl Family for Fake {
        fn name(&self) -> &'static str {
            self.0
        }
        fn architectures(&self) -> &'static [&'static str] {
            self.1
        }
        fn kind(&self) -> ModelKind {
            self.2
        }
        fn accepts(&self, dir: &Path) -> bool {
            self.3.is_empty() || dir.join(self.3).exists()
        }
        fn load(&self, _dir: &Path, _ctx: &LoadContext) -> Result<Box<dyn LoadedModel>> {
            anyhow::bail!("not loaded in this test")
        }
    }

    static VIDEO: Fake = Fake("video", &["VideoPipeline"], ModelKind::Generation, "");
    static WORLD: Fake = Fake("world", &["VideoPipeline"], ModelKind::World, "world.json");
    static LM: Fake = Fake("lm", &["LmForCausalLM"], ModelKind::Language, "");

    fn registry() -> Registry {
        Registry::new(vec![&VIDEO, &WORLD, &LM])
    }

    fn folder(index: &str, extra: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("model_index.json"), index).unwrap();
        if let Some(f) = extra {
            std::fs::write(d.path().join(f), "{}").unwrap();
        }
        d
    }

    #[test]
    fn detects_by_architecture_and_role() {
        let r = registry();
        let plain = folder(r#"{"_class_name": "VideoPipeline"}"#, None);
        assert_eq!(r.detect(plain.path(), ModelKind::Generation).unwrap().name(), "video");
        let world = folder(r#"{"_class_name": "VideoPipeline"}"#, Some("world.json"));
        assert_eq!(r.detect(world.path(), ModelKind::World).unwrap().name(), "world");
        // A plain video folder is no world model: the error says what it is.
        let e = r.detect(plain.path(), ModelKind::World).unwrap_err().to_string();
        assert!(e.contains("here: it is a generation model (--model), not a world model ([world])"), "{e}");
    }

    #[test]
    fn an_unknown_architecture_names_itself_and_the_supported_ones() {
        let d = folder(r#"{"_class_name": "FluxPipeline"}"#, None);
        let e = registry().detect(d.path(), ModelKind::Generation).unwrap_err().to_string();
        assert!(e.starts_with("architecture `FluxPipeline` (model_index.json) is not served;"), "{e}");
        assert!(e.ends_with("supported as a generation model (--model): VideoPipeline (video)"), "{e}");
        assert!(!e.contains("LmForCausalLM"), "only the role's architectures are listed: {e}");
    }
}
