//! The text encoder's tokenizer: prompt cleaning and the words it cannot encode.

use fastvideo_layers::tokenizer::{clean_prompt, TextTokenizer};

#[test]
fn unknown_words_are_named_once_in_order() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../default/tokenizer/tokenizer.json");
    let tok = TextTokenizer::from_file(&path).unwrap();
    assert!(tok.unknown_words("a red circle moving left on a white background").is_empty());
    assert_eq!(
        tok.unknown_words("a Crimson disc gliding left, crimson again"),
        ["Crimson", "disc", "gliding", ",", "again"]
    );
}

#[test]
fn cleans_like_the_reference() {
    assert_eq!(clean_prompt("  a\tred \n circle &amp; a star  "), "a red circle & a star");
}
