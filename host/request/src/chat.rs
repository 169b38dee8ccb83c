//! What a front end needs to speak OpenAI's chat API to a served language model, independent of
//! the model family: its prompt format and tokenizer ([`ChatCodec`], implemented by the model
//! crates), the text of a growing completion decoded token by token ([`IncrementalText`]), and
//! how `stop` strings cut the streamed text ([`StopText`]).

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
    /// The chat template's source, where the codec has one: a role it names literally is
    /// taken besides [`STANDARD_ROLES`] ([`check_roles`]).
    fn template_source(&self) -> Option<&str> {
        None
    }
}

/// The roles of OpenAI's chat API, taken whatever the template.
pub const STANDARD_ROLES: [&str; 5] = ["system", "user", "assistant", "tool", "developer"];

/// Refuses a message whose role is neither standard nor named (quoted) in the codec's template:
/// most templates render any role string as a header, so a typo (`"usr"`) or an invented role
/// would reach the model silently. The error names `messages[i].role`; other faults in
/// `messages` are left to [`ChatCodec::prompt`].
pub fn check_roles(messages: &serde_json::Value, codec: &dyn ChatCodec) -> Result<(), RequestError> {
    let Some(list) = messages.as_array() else { return Ok(()) };
    let template = codec.template_source().unwrap_or_default();
    let named = |role: &str| {
        !role.is_empty() && (template.contains(&format!("'{role}'")) || template.contains(&format!("\"{role}\"")))
    };
    for (i, m) in list.iter().enumerate() {
        let Some(role) = m.get("role").and_then(|r| r.as_str()) else { continue };
        if !STANDARD_ROLES.contains(&role) && !named(role) {
            let shown: String = role.chars().take(40).collect();
            return Err(RequestError::new(
                format!("messages[{i}].role"),
                format!("`{shown}` is not a role this model's chat template takes ({})", STANDARD_ROLES.join(", ")),
            ));
        }
    }
    Ok(())
}

/// A completion's text as its tokens arrive, decoding only the last few each time (the text of
/// a token can depend on the one before it, and a character may span tokens), so a long reply
/// costs linear, not quadratic, decoding.
#[derive(Debug, Default)]
pub struct IncrementalText {
    ids: Vec<i64>,
    /// Tokens before `prefix` are final text; `prefix..read` are decoded again as context.
    prefix: usize,
    read: usize,
    text: String,
}

impl IncrementalText {
    /// Adds one token; returns the text so far (a trailing incomplete character is held back
    /// until the tokens that complete it arrive).
    pub fn push(&mut self, codec: &dyn ChatCodec, id: i64) -> &str {
        self.ids.push(id);
        let before = codec.decode(&self.ids[self.prefix..self.read]);
        let now = codec.decode(&self.ids[self.prefix..]);
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') {
            self.text.push_str(after(&now, &before));
            self.prefix = self.read;
            self.read = self.ids.len();
        }
        &self.text
    }

    /// The tokens so far.
    pub fn tokens(&self) -> &[i64] {
        &self.ids
    }

    /// Everything, the held-back tail included (once the completion ended).
    pub fn finish(&self, codec: &dyn ChatCodec) -> String {
        let before = codec.decode(&self.ids[self.prefix..self.read]);
        let now = codec.decode(&self.ids[self.prefix..]);
        format!("{}{}", self.text, after(&now, &before))
    }
}

/// The part of `now` after the context `before`: where a decoder rewrote the context (rare),
/// what follows the last character the two share.
fn after<'a>(now: &'a str, before: &str) -> &'a str {
    if let Some(rest) = now.strip_prefix(before) {
        return rest;
    }
    let common = now.chars().zip(before.chars()).take_while(|(a, b)| a == b).count();
    now.char_indices().nth(common).map_or("", |(i, _)| &now[i..])
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
        // The held-back tail may hold a stop string too.
        let visible = match self.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            Some(at) => {
                self.stopped = true;
                &text[..at]
            }
            None => text,
        };
        self.advance(visible)
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

    /// Ids are bytes; a byte that is not UTF-8 on its own waits for the rest of its character.
    struct Bytes;
    impl ChatCodec for Bytes {
        fn prompt(&self, _: &serde_json::Value) -> Result<String, RequestError> {
            Ok(String::new())
        }
        fn count(&self, text: &str) -> Result<usize, RequestError> {
            Ok(text.len())
        }
        fn decode(&self, ids: &[i64]) -> String {
            String::from_utf8_lossy(&ids.iter().map(|&i| i as u8).collect::<Vec<_>>()).into_owned()
        }
    }

    #[test]
    fn incremental_text_equals_decoding_everything_and_holds_back_split_characters() {
        let whole = "a crème brûlée, 紅い円 moving left";
        let mut t = IncrementalText::default();
        let mut seen = Vec::new();
        for b in whole.bytes() {
            seen.push(t.push(&Bytes, b as i64).to_string());
        }
        assert_eq!(seen.last().unwrap(), whole);
        assert!(seen.iter().all(|s| !s.contains('\u{FFFD}')), "no half character is ever shown");
        assert!(seen.windows(2).all(|w| w[1].starts_with(w[0].as_str())), "the text only grows");
        assert_eq!(t.finish(&Bytes), whole);
        // A completion that ends inside a character shows what it has at the end.
        let mut t = IncrementalText::default();
        for b in "ok \u{00e9}".bytes().take(4) {
            t.push(&Bytes, b as i64);
        }
        assert_eq!(t.push(&Bytes, b'x' as i64), "ok \u{FFFD}x");
        assert_eq!(t.tokens().len(), 5);
    }

    /// A codec whose template names one more role.
    struct Templated;
    impl ChatCodec for Templated {
        fn prompt(&self, _: &serde_json::Value) -> Result<String, RequestError> {
            Ok(String::new())
        }
        fn count(&self, text: &str) -> Result<usize, RequestError> {
            Ok(text.len())
        }
        fn decode(&self, _: &[i64]) -> String {
            String::new()
        }
        fn template_source(&self) -> Option<&str> {
            Some("{% if message.role == 'narrator' %}...{% endif %}")
        }
    }

    #[test]
    fn unknown_roles_are_refused_unless_the_template_names_them() {
        let chat = |roles: &[&str]| {
            serde_json::Value::Array(roles.iter().map(|r| serde_json::json!({"role": r, "content": "x"})).collect())
        };
        assert!(check_roles(&chat(&STANDARD_ROLES), &Bytes).is_ok());
        let e = check_roles(&chat(&["system", "wizard"]), &Bytes).unwrap_err();
        assert_eq!(e.field, "messages[1].role");
        assert!(e.rule.contains("wizard"), "{e}");
        assert_eq!(check_roles(&chat(&["narrator"]), &Bytes).unwrap_err().field, "messages[0].role");
        assert!(check_roles(&chat(&["user", "narrator"]), &Templated).is_ok());
        assert_eq!(check_roles(&chat(&["User"]), &Templated).unwrap_err().field, "messages[0].role");
        // Shapes other than roles are the codec's to refuse.
        assert!(check_roles(&serde_json::json!([{"role": 3}, "x"]), &Bytes).is_ok());
    }

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
        // A stop string in what was held back still ends the text.
        let mut s = StopText::new(vec!["STOP".into()]).unwrap();
        assert_eq!(s.update("ab ST"), "ab ");
        assert_eq!(s.finish("ab STOP and more"), "");
        assert!(s.stopped());
        assert_eq!(s.shown(), "ab ");
        assert_eq!(StopText::new(vec![String::new()]).unwrap_err().field, "stop");
        let mut s = StopText::new(Vec::new()).unwrap();
        assert_eq!(s.update("caf\u{FFFD}"), "caf", "an incomplete character waits");
    }
}
