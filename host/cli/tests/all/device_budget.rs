//! `--max-device-memory` from the command line: a budget too small is one error line naming the
//! flag and the least budget that loads; that least budget streams, says so on the load line,
//! and makes the frames the resident model makes (float32 on the CPU: the same numbers, moved).

use crate::few_step::generate;
use crate::single_file::frames;

#[test]
fn a_device_budget_streams_and_makes_the_same_frames() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan");
    let steps = ["--timesteps", "1000,500"];
    let small = generate(&tiny, &d.join("small"), &[&steps[..], &["--max-device-memory", "1K"]].concat());
    let err = String::from_utf8_lossy(&small.stderr);
    assert!(!small.status.success() && !err.contains("panicked"), "{err}");
    let least = err.rsplit("give at least ").next().unwrap().trim().to_string();
    assert!(err.contains("--max-device-memory 1.0K is too small") && least.ends_with('M'), "{err}");

    let streamed = generate(&tiny, &d.join("streamed"), &[&steps[..], &["--max-device-memory", &least]].concat());
    let log = String::from_utf8_lossy(&streamed.stderr);
    assert!(streamed.status.success(), "{log}");
    assert!(log.contains(&format!("memory: device budget {least}")) && log.contains("streamed"), "{log}");
    let resident = generate(&tiny, &d.join("resident"), &steps);
    assert!(resident.status.success(), "{}", String::from_utf8_lossy(&resident.stderr));
    assert!(frames(&d.join("streamed")).equal(&frames(&d.join("resident"))));
}
