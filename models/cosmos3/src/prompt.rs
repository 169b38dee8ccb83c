//! The prompt as `Cosmos3OmniPipeline.tokenize_prompt` builds it: duration and resolution
//! sentences appended to the prompt (their "is not" inverses to the negative prompt), an
//! optional system message, the chat template with the generation prompt, then the
//! end-of-turn token and `<|vision_start|>`. There is no text encoder: these ids go straight
//! into the transformer.

use std::path::Path;

use anyhow::{Context, Result};
use fastvideo_qwen::chat::{ChatTokenizer, Message};

const SYSTEM_IMAGE: &str = "You are a helpful assistant who will generate images from a give prompt.";
const SYSTEM_VIDEO: &str = "You are a helpful assistant who will generate videos from a give prompt.";

/// What the templates describe.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Frames (1: an image).
    pub frames: u32,
    /// Pixels.
    pub height: u32,
    /// Pixels.
    pub width: u32,
    /// Frames per second.
    pub fps: f64,
}

/// Tokenizes prompts the pipeline's way.
pub struct PromptBuilder {
    chat: std::sync::Arc<ChatTokenizer>,
    eos: i64,
    vision_start: i64,
    /// `model_index.json`'s `default_use_system_prompt`.
    pub use_system_prompt: bool,
}

/// `base` with `addition` appended as a new sentence (`_append`: trailing dots stripped).
fn append(base: &str, addition: &str) -> String {
    let base = base.trim_end_matches('.');
    if base.is_empty() {
        addition.to_string()
    } else {
        format!("{base}. {addition}")
    }
}

impl PromptBuilder {
    /// Loads `text_tokenizer/` (tokenizer, chat template, `<|vision_start|>`).
    pub fn load(dir: &Path, use_system_prompt: bool) -> Result<Self> {
        let chat = ChatTokenizer::load(dir)?;
        let eos = chat.eos_token().and_then(|t| chat.token_id(t));
        let eos = eos.with_context(|| format!("{}: the tokenizer names no end-of-sequence token", dir.display()))?;
        let vision_start = chat
            .token_id("<|vision_start|>")
            .with_context(|| format!("{}: the tokenizer has no `<|vision_start|>` token", dir.display()))?;
        Ok(Self { chat: std::sync::Arc::new(chat), eos, vision_start, use_system_prompt })
    }

    /// The prompt text after the duration and resolution templates (or their inverses).
    pub fn templated(text: &str, negative: bool, s: Shape) -> String {
        let image = s.frames == 1;
        let not = if negative { "not " } else { "" };
        let mut text = text.to_string();
        if !image {
            let duration = s.frames as f64 / s.fps;
            text = append(
                &text,
                &format!("The video is {not}{duration:.1} seconds long and is {not}of {:.0} FPS.", s.fps),
            );
        }
        let what = if image { "image" } else { "video" };
        append(&text, &format!("This {what} is {not}of {}x{} resolution.", s.height, s.width))
    }

    /// Token ids of `text` (already templated) as a chat turn asking for generation.
    pub fn ids(&self, text: &str, image: bool) -> Result<Vec<i64>> {
        let mut messages = Vec::new();
        if self.use_system_prompt {
            messages.push(Message::new("system", if image { SYSTEM_IMAGE } else { SYSTEM_VIDEO }));
        }
        messages.push(Message::new("user", text));
        let rendered = self.chat.render(&messages, true)?;
        let mut ids = self.chat.encode(&rendered)?;
        ids.extend([self.eos, self.vision_start]);
        Ok(ids)
    }

    /// `(cond, uncond)` ids for `prompt` and `negative` (empty when none).
    pub fn branches(&self, prompt: &str, negative: &str, s: Shape) -> Result<(Vec<i64>, Vec<i64>)> {
        let image = s.frames == 1;
        Ok((
            self.ids(&Self::templated(prompt, false, s), image)?,
            self.ids(&Self::templated(negative, true, s), image)?,
        ))
    }

    /// The chat tokenizer (the reasoner's too).
    pub fn chat(&self) -> &std::sync::Arc<ChatTokenizer> {
        &self.chat
    }

    /// The end-of-turn token.
    pub fn eos(&self) -> i64 {
        self.eos
    }
}
