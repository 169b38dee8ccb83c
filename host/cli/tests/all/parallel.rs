//! `--gpus N --parallel cfg|sp|cfg+sp` as a user meets it on a machine without enough GPUs:
//! clear one-line errors naming the flag; and with every rank on one device
//! (`FASTVIDEO_PARALLEL_ONE_DEVICE=1`, the CPU here) the same generation as one device.
//! Tolerance: 1e-4 of the latents' scale (float32; the ranks' GEMMs run over fewer rows).

use std::path::Path;
use std::process::{Command, Output};

use safetensors::SafeTensors;

use crate::common::assert_user_error;

fn generate(extra: &[&str], one_device: bool, trajectory: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fastvideo"));
    cmd.args(["generate", "--device", "cpu", "--prompt", "a red circle moving left on a white background"])
        .args(["--frames", "9", "--height", "48", "--width", "48", "--steps", "3", "--seed", "4", "--quiet"])
        .arg("--out")
        .arg(trajectory.with_extension("mp4"))
        .arg("--trajectory-out")
        .arg(trajectory)
        .args(extra)
        .env("RUST_BACKTRACE", "1");
    if one_device {
        cmd.env("FASTVIDEO_PARALLEL_ONE_DEVICE", "1");
    }
    cmd.output().expect("binary runs")
}

fn latents(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensor("latents").unwrap().data().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn layouts_that_cannot_run_here_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.safetensors");
    assert_user_error(&generate(&["--gpus", "2"], false, &t), "--gpus 2 needs --parallel");
    assert_user_error(&generate(&["--gpus", "2", "--parallel", "sp"], false, &t), "ranks need CUDA devices");
    assert_user_error(&generate(&["--gpus", "0"], false, &t), "--gpus must be at least 1");
    assert_user_error(&generate(&["--gpus", "4", "--parallel", "cfg"], false, &t), "--parallel cfg uses 2 GPUs");
    assert_user_error(&generate(&["--gpus", "2", "--parallel", "tp"], false, &t), "unknown parallel mode `tp`");
    // The default model has 4 heads: 3 ranks cannot split them.
    assert_user_error(&generate(&["--gpus", "3", "--parallel", "sp"], true, &t), "4 attention heads");
    assert!(!t.exists(), "nothing written for a refused run");
}

#[test]
fn four_ranks_on_one_device_generate_what_one_device_does() {
    let dir = tempfile::tempdir().unwrap();
    let (one, par) = (dir.path().join("one.safetensors"), dir.path().join("par.safetensors"));
    let r = generate(&[], false, &one);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for (gpus, mode) in [("4", "cfg+sp"), ("2", "cfg"), ("4", "sp")] {
        let r = generate(&["--gpus", gpus, "--parallel", mode], true, &par);
        assert!(r.status.success(), "--parallel {mode}: {}", String::from_utf8_lossy(&r.stderr));
        let (a, b) = (latents(&one), latents(&par));
        assert_eq!(a.len(), b.len());
        let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale;
        assert!(err < 1e-4, "--gpus {gpus} --parallel {mode}: relative error {err}");
    }
}
