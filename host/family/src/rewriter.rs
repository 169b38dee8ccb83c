//! Prompt rewriting: a language model that rewrites a video request's prompt before the video
//! model's text encoder reads it (`prompt_extend`). Any family serving language models may
//! offer it; the assembly binds the rewriter's nodes ahead of the text encoder and checks
//! requests with it, knowing neither family.

use fastvideo_pipeline::Node;

/// A loaded prompt rewriter.
pub trait PromptRewriter: Send + Sync {
    /// The pipeline nodes that rewrite the prompt (ending in
    /// [`EXTENDED_PROMPT`](fastvideo_pipeline::EXTENDED_PROMPT)), each run only for requests
    /// that ask; the decode node is [`EXTEND_NODE`](fastvideo_pipeline::EXTEND_NODE).
    fn nodes(&self) -> Vec<Node>;

    /// Why `prompt` cannot be rewritten (e.g. it leaves the model no room to answer), as a rule
    /// the refusal of the `prompt` field states.
    fn check_prompt(&self, prompt: &str) -> Result<(), String>;
}
