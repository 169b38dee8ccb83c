//! The shipped world model (`models/world`) through the binary: an offline rollout writes an MP4
//! of the right length, bad actions get one clear error, and held-out action sequences are
//! followed (scored by the world's own simulator; thresholds below the figures in docs/world.md,
//! 97 % / 98.5 % over 10 sequences, so they hold on any CPU's rounding).

use std::process::{Command, Output};

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).env("RUST_BACKTRACE", "1").output().expect("binary runs")
}

#[test]
fn a_rollout_under_actions_writes_the_frames_it_should() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.mp4");
    let o =
        fastvideo(&["world", "--actions", "right*3,up", "--start-seed", "3", "--out", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The first frame, then 4 video frames per action.
    assert_eq!(report["frames"], 17);
    assert_eq!(report["chunks"], 5);
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[4..8], b"ftyp");
    // A warm-up first (what a server does on CUDA) leaves nothing behind: the same video.
    let warm = dir.path().join("warm.mp4");
    let args = ["world", "--actions", "right*3,up", "--start-seed", "3", "--warm-up", "--json"];
    let o = fastvideo(&[&args[..], &["--out", warm.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["warm_up_seconds"].as_f64().is_some_and(|s| s > 0.0), "{report}");
    assert_eq!(std::fs::read(&warm).unwrap(), bytes);
}

#[test]
fn fast_on_a_world_model_runs_what_its_own_gate_admitted() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.mp4");
    let run = |extra: &[&str]| {
        let args = ["world", "--actions", "right", "--out", out.to_str().unwrap(), "--json"];
        let o = fastvideo(&[&args[..], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    // The shipped folder has a tiny decoder; `fast` implies no 8-bit attention on a CPU (on a
    // GPU, the world model's own gate's recipe: fastvideo-torch's unit tests).
    let fast = run(&["--precision", "fast", "--device", "cpu"]);
    assert_eq!(fast["precision"], "fast");
    assert_eq!(fast["lossy_paths"], serde_json::json!(["tiny_decoder"]), "{fast}");
    // Named, the recipe runs there too.
    let named = run(&["--precision", "fast", "--int8-qk-attention"]);
    assert_eq!(named["lossy_paths"], serde_json::json!(["int8_qk_attention", "tiny_decoder"]), "{named}");
    assert_eq!(run(&["--precision", "bf16"])["lossy_paths"], serde_json::json!([]));
}

#[test]
fn bad_world_input_is_one_clear_error() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["world", "--actions", "right*2,jump"],
            "unknown action `jump`; this model knows none, up, down, left, right",
        ),
        (&["world", "--actions", "up*x"], "`up*x`"),
        (&["world", "--actions", "up", "--model", "../../models/default"], "has no action_embedder/ folder"),
    ];
    for (args, needle) in cases {
        let o = fastvideo(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && !err.contains("panicked"), "{args:?}: {err}");
        assert!(err.lines().filter(|l| l.starts_with("error:")).any(|l| l.contains(needle)), "{args:?}: {err}");
    }
}

#[test]
fn the_shipped_world_model_follows_held_out_actions() {
    let o = fastvideo(&["eval", "--world", "--seeds", "2", "--world-steps", "40", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (follow, found) = (r["action_following"].as_f64().unwrap(), r["ball_found"].as_f64().unwrap());
    assert_eq!(r["score"]["chunks"], 78);
    assert!(follow >= 0.85, "action following {follow}");
    assert!(found >= 0.9, "ball found {found}");
}
