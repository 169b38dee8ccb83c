//! Helpers shared by the integration tests (each test crate uses some of them).
#![allow(dead_code)]

pub mod browser;
pub mod comfy;
pub mod server;

/// Asserts a user error: non-zero exit, one `error:` line containing `needle`, no panic.
pub fn assert_user_error(out: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {err}");
    assert!(!err.contains("panicked"), "panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].contains(needle), "`{needle}` not in: {}", lines[0]);
}
