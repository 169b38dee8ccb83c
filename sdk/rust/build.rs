//! Reads the WIT package version the bindings are generated from, for `WIT_VERSION` (so a
//! manifest can never name another version than the one the plugin was built against).

fn main() {
    let path = "../../wit/fastvideo-plugin/plugin.wit";
    println!("cargo:rerun-if-changed={path}");
    let wit = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let version = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package fastvideo:plugin@"))
        .and_then(|v| v.strip_suffix(';'))
        .unwrap_or_else(|| panic!("{path}: no `package fastvideo:plugin@VERSION;` line"));
    println!("cargo:rustc-env=FASTVIDEO_WIT_VERSION={version}");
}
