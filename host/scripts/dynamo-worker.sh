#!/usr/bin/env bash
# Builds the Dynamo worker (host/dynamo, its own workspace: dynamo-runtime needs protoc and
# --cfg tokio_unstable) into host/dynamo/target/release/fastvideo-dynamo. Installs Debian's
# protobuf-compiler when protoc is missing. The first build takes a while (dynamo-runtime is
# ~560 crates, and libtorch's and wasmtime's crates build again for this workspace).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if ! command -v protoc >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" != 0 ] && sudo="sudo"
  echo "dynamo-worker.sh: installing Debian's protobuf-compiler (protoc)" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends protobuf-compiler >/dev/null 2>&1 || {
    $sudo apt-get update -q >/dev/null
    $sudo apt-get install -y -q --no-install-recommends protobuf-compiler >/dev/null
  }
fi
bash host/scripts/bootstrap.sh >/dev/null
# From inside host/dynamo, so its .cargo/config.toml (the tokio_unstable flag) applies; the
# repository's config (LIBTORCH) still does, one folder up.
# Its own target folder, whatever CARGO_TARGET_DIR says: its flags differ from the main build's.
cd host/dynamo
export CARGO_TARGET_DIR="$PWD/target"
cargo build --release --locked "$@"
echo "$PWD/target/release/fastvideo-dynamo"
