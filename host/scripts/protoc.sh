#!/usr/bin/env bash
# Installs Debian's protobuf-compiler when protoc is missing: the Dynamo worker's dependencies
# (dynamo-runtime, a workspace member) compile protobuf definitions in their build scripts.
# Idempotent.
set -euo pipefail
command -v protoc >/dev/null 2>&1 && exit 0
sudo=""
[ "$(id -u)" != 0 ] && sudo="sudo"
echo "protoc.sh: installing Debian's protobuf-compiler (protoc)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q --no-install-recommends protobuf-compiler >/dev/null 2>&1 || {
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends protobuf-compiler >/dev/null
}
