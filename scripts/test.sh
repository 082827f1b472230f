#!/usr/bin/env bash
# The test command of the README: prerequisites, then the tests of the workspace, all but the
# few long ones (the README's main job, the API fuzz run, brute forces over whole formats).
# `--long` runs those instead (CI runs both: .ci/run). Other arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
NVRTC_DIR="${TMD_NVRTC_DIR:-$HOME/.cache/tmd/nvrtc-13.0.88}"
# libnvrtc from the wheel, for the test that compiles every CUDA kernel without a GPU.
nvrtc_lib=$(find "$NVRTC_DIR" -name 'libnvrtc.so*' 2>/dev/null | head -n1 || true)
if [ -n "$nvrtc_lib" ]; then
  export LD_LIBRARY_PATH="$(dirname "$nvrtc_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# The whole-system tests run the real binaries: cargo test builds a binary only for packages
# with integration tests, so build them all first.
cargo build --workspace --release --bins
if [ "${1:-}" = "--long" ]; then
  shift
  cargo test --workspace --release "$@" -- --ignored
else
  cargo test --workspace --release "$@"
fi
