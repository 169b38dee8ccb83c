# Sourced, not run: makes cargo lint the workspace's crates with clippy while it builds them
# (`cargo clippy -- -D warnings` does the same wrapping for a check). Source it before any
# cargo build or test you want fresh against test.sh's build: the wrapper is part of each
# workspace crate's fingerprint, so building with and without it alternates rebuilds.
driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$driver" ]; then
  rustup component add clippy >&2
  driver="$(rustup which clippy-driver)"
fi
export RUSTC_WORKSPACE_WRAPPER="$driver"
# clippy-driver's arguments, as cargo-clippy passes them: `-D warnings`.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
unset driver
