//! What a front end needs to speak OpenAI's chat API to a served language model, independent of
//! the model family: its prompt format and tokenizer ([`ChatCodec`], implemented by the model
//! crates), and how `stop` strings cut the streamed text ([`StopText`]).

use crate::RequestError;

/// A language model's chat template and tokenizer, as the server uses them.
pub trait ChatCodec: Send + Sync {
    /// OpenAI's `messages` list through the model's chat template, ending with the assistant's
    /// opening; errors name the field (`messages[2].role`).
    fn prompt(&self, messages: &serde_json::Value) -> Result<String, RequestError>;
    /// Tokens `text` takes (`usage.prompt_tokens`).
    fn count(&self, text: &str) -> Result<usize, RequestError>;
    /// The text of `ids` (a whole completion so far: a token may end inside a character).
    fn decode(&self, ids: &[i64]) -> String;
}

/// The visible part of a growing completion: it ends before the first `stop` string, and text
/// that may begin one (or a trailing incomplete character) is held back until it is clear.
#[derive(Debug, Default)]
pub struct StopText {
    stop: Vec<String>,
    shown: String,
    stopped: bool,
}

impl StopText {
    /// `stop` strings must not be empty (an empty one stops nothing): the error names `stop`.
    pub fn new(stop: Vec<String>) -> Result<Self, RequestError> {
        if stop.iter().any(String::is_empty) {
            return Err(RequestError::new("stop", "empty strings stop nothing"));
        }
        Ok(Self { stop, ..Default::default() })
    }

    /// Given the whole text so far, the new visible part (possibly empty); after a stop string
    /// was found, [`stopped`](Self::stopped) is true and nothing more is shown.
    pub fn update(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        let visible = match self.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            Some(at) => {
                self.stopped = true;
                &text[..at]
            }
            None => text[..text.len() - held_back(text, &self.stop)].trim_end_matches('\u{FFFD}'),
        };
        self.advance(visible)
    }

    /// The rest once the completion ended without a stop string (what was held back).
    pub fn finish(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.advance(text)
    }

    /// Whether a stop string ended the text.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Everything shown so far.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    fn advance(&mut self, visible: &str) -> String {
        match visible.strip_prefix(self.shown.as_str()) {
            Some(new) if !new.is_empty() => {
                let new = new.to_string();
                self.shown = visible.to_string();
                new
            }
            _ => String::new(),
        }
    }
}

/// Bytes at the end of `text` that begin some stop string (and so may not be shown yet).
fn held_back(text: &str, stop: &[String]) -> usize {
    stop.iter()
        .flat_map(|s| (1..s.len()).rev().filter(|&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
        .filter(|prefix| text.ends_with(prefix))
        .map(str::len)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_ends_before_a_stop_string_and_its_possible_start_waits() {
        let mut s = StopText::new(vec!["</answer>".into(), "\n\n".into()]).unwrap();
        assert_eq!(s.update("a red"), "a red");
        assert_eq!(s.update("a red circle</ans"), " circle");
        assert_eq!(s.update("a red circle</answer> more"), "");
        assert!(s.stopped());
        assert_eq!(s.shown(), "a red circle");
        assert_eq!(s.finish("a red circle</answer> more"), "");

        let mut s = StopText::new(vec!["STOP".into()]).unwrap();
        assert_eq!(s.update("ab\n"), "ab\n");
        assert_eq!(s.update("ab\nST"), "");
        assert_eq!(s.finish("ab\nST"), "ST", "held back until the end shows it was not a stop");
        assert_eq!(StopText::new(vec![String::new()]).unwrap_err().field, "stop");
        let mut s = StopText::new(Vec::new()).unwrap();
        assert_eq!(s.update("caf\u{FFFD}"), "caf", "an incomplete character waits");
    }
}
