//! The one list of model families this runtime serves. Adding a family is one line here (and
//! the family's crate); every front end detects and loads folders through [`registry`].

#![deny(missing_docs)]

use std::sync::OnceLock;

pub use fastvideo_family::*;

/// Every family, in the order detection tries them.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        Registry::new(vec![
            &fastvideo_wan::family::WAN,
            &fastvideo_wan::family::WAN_WORLD,
            &fastvideo_qwen::family::QWEN,
            &fastvideo_cosmos3::family::COSMOS3,
            &fastvideo_flux2::family::FLUX2,
            &fastvideo_qwenimage::family::QWEN_IMAGE,
            &fastvideo_ltx2::family::LTX2,
        ])
    })
}
