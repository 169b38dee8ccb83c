#!/usr/bin/env bash
# Motion-to-photon latency of a world session in Debian's headless Chromium, WebRTC vs the
# WebSocket fallback, alone and beside text-to-video jobs (host/cli/benches/world_latency.rs).
# Prints a Markdown table; FASTVIDEO_BENCH_SECONDS (default 10) per phase.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash host/scripts/bootstrap.sh
bash host/scripts/browser.sh
exec cargo bench -p fastvideo --bench world_latency
