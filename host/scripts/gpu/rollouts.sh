#!/usr/bin/env bash
# RL rollout throughput on the GPU (docs/rl.md): `fastvideo serve --device cuda` on the default
# model with the reward deploy, grouped /v1/rollouts (flow_sde, trajectories, both rewards) with
# the engine's cross-request step batching off (--max-batch 1) and on (8). Run from the repo root
# with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo} and the deploy at .gpu/deploys/rewards.toml
# (examples/plugins-deploy.sh .gpu/deploys).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
for batch in 1 8; do
  "$BIN" serve --device cuda --port 8199 --ephemeral --max-batch "$batch" --deploy .gpu/deploys/rewards.toml 2>/tmp/serve.log &
  pid=$!
  for _ in $(seq 1 300); do grep -q serving /tmp/serve.log && break; sleep 0.1; done
  python3 host/scripts/gpu/rollout_rate.py http://127.0.0.1:8199 1 2 4 64 17 >/dev/null   # warm-up
  for shape in "64 17" "256 33"; do
    # shellcheck disable=SC2086
    echo "max_batch=$batch $(python3 host/scripts/gpu/rollout_rate.py http://127.0.0.1:8199 4 8 20 $shape color_match,motion_direction)"
    # What the rewards and the trajectory cost: the same samples without them.
    # shellcheck disable=SC2086
    echo "max_batch=$batch $(python3 host/scripts/gpu/rollout_rate.py http://127.0.0.1:8199 4 8 20 $shape - euler)"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
