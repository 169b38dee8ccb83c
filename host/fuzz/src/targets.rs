//! The fuzz targets: each returns whether the input was accepted (an error is a fine outcome;
//! only a panic is a crash).

use fastvideo_request::ModelLimits;

pub struct Target {
    pub name: &'static str,
    pub what: &'static str,
    /// Inputs are cut to this length.
    pub max_len: usize,
    pub run: fn(&[u8]) -> bool,
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "request-json",
        what: "a POST /v1/videos JSON body to the engine request (params.rs)",
        max_len: 1 << 16,
        run: request_json,
    },
    Target {
        name: "request-form",
        what: "multipart form fields (name=value lines) to the engine request (params.rs)",
        max_len: 1 << 16,
        run: request_form,
    },
    Target {
        name: "deploy-toml",
        what: "a deploy file (deploy.rs's DeployConfig)",
        max_len: 1 << 16,
        run: deploy_toml,
    },
    Target {
        name: "component-audit",
        what: "a plugin component's bytes to its audit (manifest.rs's inspect)",
        max_len: 1 << 20,
        run: component_audit,
    },
];

fn limits() -> ModelLimits {
    ModelLimits::example()
}

fn request_json(b: &[u8]) -> bool {
    fastvideo_server::video_request_from_json(b, &limits()).is_ok()
}

fn request_form(b: &[u8]) -> bool {
    let text = String::from_utf8_lossy(b);
    let fields: Vec<(&str, &str)> = text.lines().map(|l| l.split_once('=').unwrap_or((l, ""))).collect();
    fastvideo_server::video_request_from_form(&fields, &limits()).is_ok()
}

fn deploy_toml(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(|t| toml::from_str::<fastvideo_plugin_host::DeployConfig>(t).is_ok())
}

fn component_audit(b: &[u8]) -> bool {
    fastvideo_plugin_host::inspect(b).is_ok()
}
