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
