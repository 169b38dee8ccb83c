#!/usr/bin/env bash
# Sets up (libtorch from PyPI and Debian's Chromium, once) and runs every check: formatting, clippy, the test suite.
# This is the README's test command and what CI runs (.ci/run). Needs no GPU. Its one Python
# package is the official `openai` client (PyPI, into .venv-client), which the server tests use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# A clean build gains nothing from incremental caches, which would be a few GB more on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | tail -n1 | awk '{print "test.sh: " $4 " free on the disk holding the checkout"}' >&2
bash host/scripts/bootstrap.sh
bash host/scripts/client-venv.sh
# The WebRTC test drives a real browser.
bash host/scripts/browser.sh
# The ComfyUI workflow tests read the public template corpus (PyPI, pinned).
bash host/scripts/comfy-corpus.sh >/dev/null
# ComfyUI's own client, which a server test drives the ComfyUI API with.
bash host/scripts/comfy-client.sh
# Plugins (plugins/, sdk/) build for wasm32-unknown-unknown; the plugin tests build them.
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
cargo fmt --all -- --check
cargo fmt --manifest-path plugins/Cargo.toml --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --manifest-path plugins/Cargo.toml --target wasm32-unknown-unknown --locked -- -D warnings
# The guest SDK's own tests (its typed manifest, its doc examples) run on the host.
cargo test --manifest-path plugins/Cargo.toml -p fastvideo-plugin-sdk --locked
cargo test --workspace --locked
# The fleet test: Dynamo's frontend and two fastvideo-dynamo workers (its own build, ~20 min cold).
bash host/scripts/dynamo-e2e.sh
