#!/usr/bin/env bash
# The RL demo (docs/rl.md): Flow-GRPO on the default model with `fastvideo serve` as the rollout
# engine and the first-party reward plugins as the reward. Writes WORK/log.jsonl and the trained
# transformer to WORK/transformer; models/default is never written.
#   bash examples/rl/run.sh WORK [trainer flags...]     e.g. bash examples/rl/run.sh /tmp/rl --iterations 20
# Needs the Python stack of tests/fixtures/requirements.txt (torch, diffusers, transformers) in
# $PYTHON (default: .venv-rl/bin/python, made here from PyPI when missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="${1:?usage: run.sh WORK [trainer flags]}"; shift
mkdir -p "$work"
py="${PYTHON:-$root/.venv-rl/bin/python}"
if [ ! -x "$py" ]; then
  python3 -m venv "$root/.venv-rl"
  "$root/.venv-rl/bin/pip" install --quiet -r "$root/tests/fixtures/requirements.txt"
  py="$root/.venv-rl/bin/python"
fi
bash "$root/host/scripts/bootstrap.sh"
(cd "$root" && cargo build --release -p fastvideo)
bash "$root/examples/plugins-deploy.sh" "$work/deploys" >/dev/null
port="${PORT:-8123}"
"$root/target/release/fastvideo" serve --port "$port" --device cpu --ephemeral \
  --deploy "$work/deploys/rewards.toml" 2> "$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  grep -q "serving" "$work/server.log" 2>/dev/null && break
  sleep 0.1
done
"$py" "$root/examples/rl/train_grpo.py" --server "http://127.0.0.1:$port" --model "$root/models/default" \
  --work "$work" "$@"
