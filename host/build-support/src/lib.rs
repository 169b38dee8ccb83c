//! Build-script helper shared by every crate whose binaries or tests link libtorch.
//!
//! `torch-sys` links libtorch but puts no rpath in the final binary, so without this the binaries
//! only start with `LD_LIBRARY_PATH` set. Linker flags from a dependency's build script do not
//! reach dependents, so each crate that produces a binary or test calls [`libtorch_rpath`] from
//! its own `build.rs`. The rpath is a `RUNPATH`, so `LD_LIBRARY_PATH` still overrides it: that is
//! how a machine with its own full CUDA libtorch (the GPU machines) swaps the CPU build out.

#![deny(missing_docs)]

use std::path::PathBuf;

/// Emits `-Wl,-rpath,<LIBTORCH>/lib` for this package's binaries, tests, benches and examples.
pub fn libtorch_rpath() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(dir) = std::env::var_os("LIBTORCH") else {
        println!("cargo:warning=LIBTORCH is not set; run host/scripts/bootstrap.sh");
        return;
    };
    let lib = PathBuf::from(dir).join("lib");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
