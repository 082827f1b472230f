#!/usr/bin/env bash
# Installs what a fresh machine lacks for building and testing tmd. Idempotent; safe to re-run.
#  - m4: GMP/MPFR (through the `rug` crate) are built from source and need it.
#  - NVRTC 13.0 from the pip wheel: CI compiles every CUDA kernel even without a GPU.
#  - PostgreSQL: tests need a server; the local cluster is started if it is installed and down
#    (otherwise the test helper initdb's a private one).
#  - Chromium (Debian's package, never a downloaded browser): the dashboard test runs it
#    headless. Without it that test fails in CI and is skipped elsewhere.
#  - schemathesis (pip, pinned): the API fuzz test; same rule.
set -euo pipefail

need_apt=()
command -v m4 >/dev/null 2>&1 || need_apt+=(m4)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install: ${need_apt[*]} (needed to build GMP/MPFR)" >&2
    exit 1
  fi
fi

# Chromium for the dashboard test; optional here (that test says what is missing).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
      || echo "setup: warning: could not install chromium; the dashboard test will fail in CI" >&2
  else
    echo "setup: warning: no chromium; install Debian's chromium for the dashboard test" >&2
  fi
fi

# NVRTC for the kernel compilation test (no GPU needed). Pinned to CUDA 13.0.x.
NVRTC_DIR="${TMD_NVRTC_DIR:-$HOME/.cache/tmd/nvrtc-13.0.88}"
if [ ! -d "$NVRTC_DIR/nvidia" ]; then
  echo "setup: installing the NVRTC 13.0.88 wheel into $NVRTC_DIR"
  python3 -m pip install -q --no-deps --target "$NVRTC_DIR" nvidia-cuda-nvrtc==13.0.88 \
    || echo "setup: warning: could not install NVRTC; the kernel compilation test will fail" >&2
fi

# schemathesis (pinned) for the API fuzz test (server/tests/fuzz.rs), into its own directory.
ST_DIR="${TMD_SCHEMATHESIS_DIR:-$HOME/.cache/tmd/schemathesis-4.32.5}"
if [ ! -d "$ST_DIR/schemathesis" ]; then
  echo "setup: installing schemathesis 4.32.5 into $ST_DIR"
  python3 -m pip install -q --target "$ST_DIR" schemathesis==4.32.5 \
    || echo "setup: warning: could not install schemathesis; the API fuzz test will fail in CI" >&2
fi

# PostgreSQL: start the machine's cluster if one is installed and not answering.
if ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    v=$(ls /etc/postgresql | sort -V | tail -n1)
    echo "setup: starting PostgreSQL $v"
    pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  fi
fi
