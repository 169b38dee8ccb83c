//! `fastvideo chat` on the tiny Qwen3 fixture (random weights: the text is noise, the counts and
//! the streaming are what is checked), and its errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

fn lm() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3").display().to_string()
}

#[test]
fn chat_streams_a_completion_and_reports_usage() {
    let out = fastvideo(&["chat", "--lm", &lm(), "a crimson disc gliding leftwards over snow", "--max-tokens", "20"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The default system turn, the user turn and the assistant's opening: 71 template tokens.
    assert!(err.contains("usage: 71 prompt + 20 completion tokens, finish length"), "{err}");
    assert!(!out.stdout.is_empty());
    // Seeded sampling is reproducible run to run.
    let args = ["chat", "--lm", &lm(), "hi", "--max-tokens", "12", "--temperature", "1.3", "--seed", "5"];
    assert_eq!(fastvideo(&args).stdout, fastvideo(&args).stdout);
}

#[test]
fn chat_errors_name_the_field_and_exit_non_zero() {
    for (args, want) in [
        (vec!["--top-p", "2"], "top_p"),
        (vec!["--temperature=-1"], "temperature"),
        (vec!["--max-tokens", "0"], "max_tokens"),
    ] {
        let lm_dir = lm();
        let mut all = vec!["chat", "--lm", lm_dir.as_str(), "hi"];
        all.extend(args);
        let out = fastvideo(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{want}: {err}");
    }
    let out = fastvideo(&["chat", "--lm", "/nonexistent", "hi"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no config.json"));
}
