//! Helpers shared by the integration tests (each test crate uses some of them).
#![allow(dead_code)]

pub mod browser;
pub mod comfy;
pub mod server;
