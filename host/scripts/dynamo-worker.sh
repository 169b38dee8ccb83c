#!/usr/bin/env bash
# Builds the Dynamo worker (host/dynamo, a member of the main workspace) and prints its path.
# It shares the workspace's target folder and lock file (building one package resolves features
# for it alone, so some shared crates may build once more than in `cargo test --workspace`).
# Pass --release for an optimized build (target/release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash host/scripts/protoc.sh
bash host/scripts/bootstrap.sh >/dev/null
cargo build -p fastvideo-dynamo --locked "$@" >&2
profile=debug
for a in "$@"; do [ "$a" = "--release" ] && profile=release; done
echo "${CARGO_TARGET_DIR:-$PWD/target}/$profile/fastvideo-dynamo"
