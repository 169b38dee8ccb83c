//! `fastvideo plugin hash|audit` and `generate --deploy` as an operator runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

fn fastvideo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastvideo")).args(args).output().expect("binary runs")
}

fn cfg_plugin() -> &'static PathBuf {
    &common::plugins()["fastvideo_guider_cfg"]
}

fn write_deploy(dir: &Path, hash: &str, grants: &str) -> PathBuf {
    let p = dir.join("deploy.toml");
    let text = format!(
        "[[plugins]]\nname = \"cfg\"\nsource = \"{}\"\nblake3 = \"{hash}\"\ngrants = {grants}\n",
        cfg_plugin().display()
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn decode(png_bytes: &[u8]) -> Vec<u8> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes.to_vec())).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    buf
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn hash_and_audit_read_the_file_without_running_it() {
    let path = cfg_plugin().to_str().unwrap();
    let hash = stdout(&fastvideo(&["plugin", "hash", path]));
    let want = blake3::hash(&std::fs::read(cfg_plugin()).unwrap()).to_hex().to_string();
    assert!(hash.starts_with(&want), "{hash}");

    let v: serde_json::Value = serde_json::from_str(&stdout(&fastvideo(&["plugin", "audit", path, "--json"]))).unwrap();
    assert_eq!(v["audit"]["blake3"], want);
    assert_eq!(v["audit"]["manifest"]["kind"], "guider");
    assert_eq!(v["audit"]["capabilities"], serde_json::json!(["tensor", "tensor-ops"]));

    let dir = tempfile::tempdir().unwrap();
    let deploy = write_deploy(dir.path(), &want, r#"["tensor"]"#);
    let text = stdout(&fastvideo(&["plugin", "audit", path, "--deploy", deploy.to_str().unwrap()]));
    assert!(text.contains("hash matches") && text.contains("missing: tensor-ops"), "{text}");
}

/// A WASI command component, as `cargo build --target wasm32-wasip2` makes one, without our
/// manifest: it imports sockets, the filesystem and stdout, and exports `wasi:cli/run`.
const WASI_COMMAND: &str = r#"(component
  (import "wasi:sockets/tcp@0.2.6" (instance))
  (import "wasi:filesystem/types@0.2.6" (instance))
  (import "wasi:cli/stdout@0.2.6" (instance))
  (core module $m (func (export "run") (result i32) i32.const 0))
  (core instance $i (instantiate $m))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $r (export "run" (func $run)))
  (export "wasi:cli/run@0.2.6" (instance $r))
)"#;

#[test]
fn auditing_a_component_that_is_no_plugin_shows_its_imports_then_why_it_cannot_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("command.wasm");
    std::fs::write(&path, wat::parse_str(WASI_COMMAND).unwrap()).unwrap();
    let p = path.to_str().unwrap();
    let out = fastvideo(&["plugin", "audit", p]);
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "not loadable: a non-zero exit");
    for import in ["wasi:sockets/tcp@0.2.6", "wasi:filesystem/types@0.2.6", "wasi:cli/stdout@0.2.6"] {
        assert!(text.contains(import), "imports shown: {text}");
    }
    assert!(text.contains("exports:     wasi:cli/run@0.2.6"), "{text}");
    assert!(text.contains("manifest:    none"), "{text}");
    assert!(text.contains("cannot load: imports interfaces this host does not provide: wasi:sockets"), "{text}");
    assert!(text.contains("cannot load: no `fastvideo-manifest` custom section"), "{text}");
    assert!(err.contains("cannot load as a plugin") && !err.contains("panicked"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&fastvideo(&["plugin", "audit", p, "--json"]).stdout).unwrap();
    assert_eq!(v["loadable"], false);
    assert_eq!(v["audit"]["imports"].as_array().unwrap().len(), 3);
    assert_eq!(v["cannot_load"].as_array().unwrap().len(), 2, "{v}");
    // A deploy refusal lists every ungranted import whatever else is wrong.
    let deploy = dir.path().join("deploy.toml");
    let hash = blake3::hash(&std::fs::read(&path).unwrap()).to_hex().to_string();
    std::fs::write(
        &deploy,
        format!("[[plugins]]\nname = \"cmd\"\nsource = \"{p}\"\nblake3 = \"{hash}\"\ngrants = [\"tensor\"]\n"),
    )
    .unwrap();
    let e = fastvideo_plugin_host::Deployment::load(&deploy).err().unwrap().to_string();
    assert!(
        e.contains("not granted: wasi:sockets/tcp@0.2.6, wasi:filesystem/types@0.2.6, wasi:cli/stdout@0.2.6")
            && e.contains("no `fastvideo-manifest`"),
        "{e}"
    );
}

#[test]
fn generate_with_a_deploy_runs_the_guider_plugin_and_refuses_bad_deploys() {
    let dir = tempfile::tempdir().unwrap();
    let hash = blake3::hash(&std::fs::read(cfg_plugin()).unwrap()).to_hex().to_string();
    let deploy = write_deploy(dir.path(), &hash, r#"["tensor", "tensor-ops"]"#);
    let common = ["--prompt", "a red circle moving left on a white background", "--steps", "3", "--seed", "5"];
    let frames = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mp4 = dir.path().join("x.mp4");
        let mut args = vec!["generate"];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--frames-dir", out.to_str().unwrap(), "--out", mp4.to_str().unwrap()]);
        let r = fastvideo(&args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        (String::from_utf8_lossy(&r.stderr).to_string(), std::fs::read(out.join("frame_0008.png")).unwrap())
    };
    let (log, with_plugin) = frames("plugin", &["--deploy", deploy.to_str().unwrap()]);
    assert!(log.contains("guider: plugin `cfg`"), "{log}");
    let (_, builtin) = frames("builtin", &[]);
    // Same guidance math up to float associativity: decoded pixels within one level.
    let (a, b) = (decode(&with_plugin), decode(&builtin));
    assert_eq!(a.len(), b.len());
    let max = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
    assert!(max <= 1, "max pixel difference {max}");

    let bad = write_deploy(dir.path(), &"0".repeat(64), r#"["tensor", "tensor-ops"]"#);
    let r = fastvideo(&["generate", "--prompt", "x", "--deploy", bad.to_str().unwrap(), "--out", "/tmp/never.mp4"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("`cfg`") && err.contains("blake3") && !err.contains("panicked"),
        "{err}"
    );
    let r = fastvideo(&["generate", "--prompt", "x", "--plugin-param", "cfg.a=1", "--out", "/tmp/never.mp4"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--deploy"), "{err}");
}
