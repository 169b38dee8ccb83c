//! The folder's tokenizer and chat template against transformers' `apply_chat_template` on the
//! fixtures of `tests/fixtures/make_qwen_fixtures.py`: the same text and the same ids, exactly.

use std::path::{Path, PathBuf};

use fastvideo_qwen::{ChatTokenizer, Message};
use tch::Tensor;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3")
}

fn expected(name: &str) -> Vec<i64> {
    let t = Tensor::read_safetensors(dir().join("expected.safetensors")).unwrap();
    Vec::try_from(t.iter().find(|(k, _)| k == name).map(|(_, v)| v.shallow_clone()).unwrap()).unwrap()
}

fn chats() -> Vec<Vec<Message>> {
    vec![
        vec![Message::new("user", "a crimson disc gliding leftwards over snow")],
        vec![
            Message::new("system", "Rewrite prompts."),
            Message::new("user", "  blue square moving up  "),
            Message::new("assistant", "a blue square moving up"),
            Message::new("user", "and a yellow star?"),
        ],
    ]
}

#[test]
fn the_chat_template_renders_and_tokenizes_as_transformers_does() {
    let tok = ChatTokenizer::load(&dir()).unwrap();
    assert!(tok.has_template());
    for (i, chat) in chats().iter().enumerate() {
        let text = tok.render(chat, true).unwrap();
        let want = std::fs::read_to_string(dir().join(format!("chat{i}.txt"))).unwrap();
        assert_eq!(text, want, "chat {i}: rendered text");
        assert_eq!(tok.encode(&text).unwrap(), expected(&format!("chat{i}_ids")), "chat {i}: ids");
        // Admission tokenizes a prompt, then the pipeline does again: the second is a lookup.
        let hits = tok.encode_hits();
        assert_eq!(tok.encode(&text).unwrap(), expected(&format!("chat{i}_ids")), "chat {i}: ids again");
        assert_eq!(tok.encode_hits(), hits + 1, "chat {i}: the second encoding is remembered");
    }
    let reply = expected("reply_ids");
    assert_eq!(tok.decode(&reply).unwrap(), "a red circle moving left");
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
}

#[test]
fn a_bad_role_is_an_error_naming_it() {
    let tok = ChatTokenizer::load(&dir()).unwrap();
    let e = tok.render(&[Message::new("wizard", "hi")], true).unwrap_err().to_string();
    assert!(e.contains("unknown role: wizard"), "{e}");
}

#[test]
fn openai_messages_parse_and_bad_ones_are_named() {
    use fastvideo_qwen::chat::parse_messages;
    let ok = serde_json::json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a red "}, {"type": "text", "text": "circle"}]},
    ]);
    let m = parse_messages(&ok).unwrap();
    assert_eq!(m[1], Message::new("user", "a red circle"));
    for (bad, field) in [
        (serde_json::json!({"role": "user"}), "messages: must be a list"),
        (serde_json::json!([]), "at least one"),
        (serde_json::json!([{"content": "x"}]), "messages[0].role"),
        (serde_json::json!([{"role": "user", "content": 3}]), "messages[0].content"),
        (serde_json::json!([{"role": "user", "content": [{"type": "image_url"}]}]), "messages[0].content[0]"),
    ] {
        let e = parse_messages(&bad).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}

#[test]
fn a_template_that_loops_too_long_is_an_error() {
    use fastvideo_qwen::chat::render_template;
    let t = "{% for i in range(100000000) %}x{% endfor %}";
    let e = render_template(t, &[Message::new("user", "hi")], true, "", "").unwrap_err().to_string();
    assert!(!e.is_empty());
    let nested = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    assert!(render_template(nested, &[], true, "", "").is_err(), "bounded by fuel, not by patience");
}

#[test]
fn a_stop_string_ends_the_reply_before_it_and_is_never_streamed() {
    use fastvideo_pipeline::token::{DecodeParams, FinishReason};
    use fastvideo_qwen::LanguageModel;
    let lm = LanguageModel::load(&dir(), tch::Device::Cpu, tch::Kind::Float).unwrap();
    let chat = [Message::new("user", "a crimson disc")];
    let params = DecodeParams { max_tokens: 40, ..Default::default() };
    let full = lm.chat(&chat, &params, &[], |_| {}).unwrap();
    // A stop string from the middle of the unstopped reply (on character boundaries).
    let chars: Vec<char> = full.text.chars().collect();
    assert!(chars.len() > 12, "the reply is long enough to cut: {:?}", full.text);
    let stop: String = chars[8..11].iter().collect();
    let want = &full.text[..full.text.find(&stop).unwrap()];
    let mut streamed = String::new();
    let cut = lm.chat(&chat, &params, std::slice::from_ref(&stop), |p| streamed.push_str(p)).unwrap();
    assert_eq!(cut.text, want);
    assert_eq!(streamed, want, "nothing of the stop string is streamed");
    assert_eq!(cut.finish_reason, FinishReason::Stop);
    // Without a stop string, the streamed pieces add up to the whole reply.
    let mut all = String::new();
    let again = lm.chat(&chat, &params, &[], |p| all.push_str(p)).unwrap();
    assert_eq!((all.as_str(), again.finish_reason), (full.text.as_str(), FinishReason::Length));
    assert!(lm.chat(&chat, &params, &[String::new()], |_| {}).unwrap_err().to_string().contains("stop"));
}
