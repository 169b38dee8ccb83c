#!/usr/bin/env bash
# Installs Debian's Chromium (which decodes H.264; Playwright's build does not) for the browser
# tests, once. Fails loudly when it cannot: those tests are never skipped.
set -euo pipefail
if command -v "${FASTVIDEO_CHROMIUM:-chromium}" >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "browser.sh: Chromium is missing and installing it needs root (apt-get install chromium)" >&2; exit 1; }
  sudo="sudo"
fi
echo "browser.sh: installing Debian's chromium (~100 MB download, once)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || {
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null
}
command -v chromium >/dev/null || { echo "browser.sh: chromium did not install" >&2; exit 1; }
echo "browser.sh: $(chromium --version 2>/dev/null)" >&2
