#!/usr/bin/env bash
# Sets up (libtorch from PyPI, Debian's ffmpeg libraries and Chromium, once) and runs every check: formatting, clippy, the test suite.
# This is the README's test command and what CI runs (.ci/run). Needs no GPU. Its one Python
# package is the official `openai` client (PyPI, into .venv-client), which the server tests use.
# Ends with a table of how long each phase took (also when a phase fails), so a slower CI shows
# where the time went.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# A clean build gains nothing from incremental caches, which would be a few GB more on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | tail -n1 | awk '{print "test.sh: " $4 " free on the disk holding the checkout"}' >&2

timings=()
started=$SECONDS
current="" current_t0=0
summary() {
  local rc=$?
  {
    echo "test.sh: phase timings"
    for t in ${timings[@]+"${timings[@]}"}; do echo "  $t"; done
    if [ "$rc" != 0 ] && [ -n "$current" ]; then
      printf '  %-44s %6ds  FAILED\n' "$current" $((SECONDS - current_t0))
    fi
    printf '  %-44s %6ds\n' "total" $((SECONDS - started))
    [ "$rc" = 0 ] || echo "test.sh: failed (exit $rc)"
  } >&2
}
trap summary EXIT
phase() { # name, then the command
  current=$1 current_t0=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-44s %6ds' "$current" $((SECONDS - current_t0)))")
  current=""
}

setup() {
  bash host/scripts/bootstrap.sh
  # Video inputs decode with ffmpeg's libraries (Debian's libav*-dev; bindgen needs libclang).
  bash host/scripts/ffmpeg.sh
  bash host/scripts/client-venv.sh
  # The WebRTC test drives a real browser.
  bash host/scripts/browser.sh
  # The ComfyUI workflow tests read the public template corpus (PyPI, pinned).
  bash host/scripts/comfy-corpus.sh >/dev/null
  # ComfyUI's own client, which a server test drives the ComfyUI API with.
  bash host/scripts/comfy-client.sh
  # The Dynamo worker's dependencies compile protobuf definitions.
  bash host/scripts/protoc.sh
  # Dynamo's frontend (PyPI) for the fleet test.
  bash host/scripts/dynamo-venv.sh
  # Plugins (plugins/, sdk/) build for wasm32-unknown-unknown; the plugin tests build them.
  rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
}
fmt() {
  cargo fmt --all -- --check
  cargo fmt --manifest-path plugins/Cargo.toml --all -- --check
}

phase "setup (libtorch, ffmpeg, venvs, browser, protoc)" setup
phase "fmt" fmt
phase "clippy (plugins, wasm32)" cargo clippy --manifest-path plugins/Cargo.toml --target wasm32-unknown-unknown --locked -- -D warnings
# The guest SDK's own tests (its typed manifest, its doc examples) run on the host.
phase "sdk tests" cargo test --manifest-path plugins/Cargo.toml -p fastvideo-plugin-sdk --locked
# Clippy lints the workspace's crates while the test build compiles them (clippy-driver as the
# workspace's rustc wrapper, which is what `cargo clippy` itself does for a check), so the
# dependencies compile once, not once for a check and again for the tests. Both cargo calls
# below see the same wrapper, so the run finds the build fresh. The lints are those of
# `cargo clippy --workspace --all-targets -- -D warnings`.
source host/scripts/lint-env.sh
# `--timings` leaves a per-crate report (target/cargo-timings/) to read when this phase grows.
phase "build tests + clippy (workspace)" cargo test --workspace --all-targets --locked --no-run --timings
phase "run tests (workspace)" cargo test --workspace --locked
# The fleet test: Dynamo's frontend and two fastvideo-dynamo workers: the binary the workspace's
# test build made (its features unified with everything else's, so nothing builds again).
phase "dynamo fleet test" env FASTVIDEO_DYNAMO="${CARGO_TARGET_DIR:-$PWD/target}/debug/fastvideo-dynamo" \
  bash host/scripts/dynamo-e2e.sh
