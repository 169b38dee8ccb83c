#!/usr/bin/env bash
# Sets up (libtorch from PyPI, once) and runs every check: formatting, clippy, the test suite.
# This is the README's test command and what CI runs (.ci/run). Needs no GPU and no Python
# packages beyond pip itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash host/scripts/bootstrap.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
