//! A short run of every fuzz target (CI's smoke; `fastvideo-fuzz` runs the long ones), and the
//! inputs that once crashed the server, kept as regressions.

use fastvideo_fuzz::{corpus, run, TARGETS};

#[test]
fn every_target_survives_a_short_run_from_its_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for t in TARGETS {
        let seeds = corpus(&dir, t).unwrap();
        assert!(seeds.len() >= 2, "{}: the corpus needs seeds", t.name);
        // The target is wired to a real parser: its own seeds parse.
        assert!(seeds.iter().any(|s| (t.run)(s)), "{}: no seed is accepted", t.name);
        let report = run(t, &seeds, 5_000, 7, |_| {});
        assert_eq!(report.executions, 5_000 + seeds.len() as u64);
        let crashes: Vec<_> = report
            .crashes
            .iter()
            .map(|(i, m)| (String::from_utf8_lossy(&i[..i.len().min(200)]).into_owned(), m))
            .collect();
        assert!(crashes.is_empty(), "{}: {crashes:?}", t.name);
    }
}

#[test]
fn form_names_nested_deep_are_an_error_not_a_stack_overflow() {
    let deep = format!("plugin_params{}=1\nprompt=p", "[a]".repeat(100_000));
    let t = TARGETS.iter().find(|t| t.name == "request-form").unwrap();
    assert!(!(t.run)(deep.as_bytes()), "refused");
    assert!((t.run)(b"prompt=p\nseed=3"), "a plain form is accepted");
}
