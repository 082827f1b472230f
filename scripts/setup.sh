#!/usr/bin/env bash
# Installs what a fresh machine lacks for building and testing tmd. Idempotent; safe to re-run.
#  - m4: GMP/MPFR (through the `rug` crate) are built from source and need it; curl and python3
#    for the main job (scripts/local-campaign.sh) and the test of its progress loop; g++ for the
#    test that runs the CUDA kernels' existence tests on the host.
#  - NVRTC 13.0 from the pip wheel: CI compiles every CUDA kernel even without a GPU.
#  - PostgreSQL: tests and the main job need a server; Debian's `postgresql` is installed when
#    none is, and the machine's cluster started when it is down (else they initdb a private one).
#  - Chromium (Debian's package, never a downloaded browser): the dashboard test runs it
#    headless. Without it that test fails in CI and is skipped elsewhere.
#  - schemathesis (pip, pinned): the API fuzz test; same rule.
set -euo pipefail

need_apt=()
command -v m4 >/dev/null 2>&1 || need_apt+=(m4)
# A C++ compiler: a test runs the CUDA kernels' existence tests on the host (cuda/host.rs).
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
# The main job and its progress-loop test talk to the coordinator with curl and python3.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: please install: ${need_apt[*]} (m4 builds GMP/MPFR; curl and python3 run the main job; g++ runs a kernel test)" >&2
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

# PostgreSQL: the tests and the main job want a server on 127.0.0.1:5432 that lets `postgres` in
# without a password (or DATABASE_URL). Start the machine's cluster if it is down; install
# Debian's `postgresql` if there is none. TMD_SETUP_PG_PORT (5432) is for testing this part.
pg_port=${TMD_SETUP_PG_PORT:-5432}
pg_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$pg_port") 2>/dev/null; }
pg_installed() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; }
if [ -z "${DATABASE_URL:-}" ] && ! pg_answers; then
  fresh=0
  if ! pg_installed; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: no PostgreSQL installed: installing Debian's postgresql"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
      fresh=1
    else
      echo "setup: no PostgreSQL on 127.0.0.1:$pg_port and none installed. Install Debian's" \
        "postgresql package (sudo apt-get install postgresql) and re-run, or set DATABASE_URL" \
        "to a server where tests may create databases." >&2
      exit 1
    fi
  fi
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    v=$(ls /etc/postgresql | sort -V | tail -n1)
    hba=/etc/postgresql/$v/main/pg_hba.conf
    if [ "$fresh" = 1 ] && [ -f "$hba" ] && ! grep -q '^# tmd:' "$hba"; then
      # The cluster the package just created asks for a password over TCP; the tests connect
      # as `postgres` without one, from this machine only.
      echo "setup: letting postgres in from 127.0.0.1 without a password ($hba)"
      printf '# tmd: tests and the main job connect as postgres from this machine\nhost all postgres 127.0.0.1/32 trust\n' \
        | cat - "$hba" > "$hba.tmd" && mv "$hba.tmd" "$hba"
      chown postgres:postgres "$hba" 2>/dev/null || true
    fi
    if [ "$(id -u)" = 0 ] || [ "$(id -un)" = postgres ]; then
      echo "setup: starting PostgreSQL $v"
      pg_ctlcluster --skip-systemctl-redirect "$v" main start 2>&1 || true
      # The package may have started the cluster before pg_hba.conf was changed.
      if [ "$fresh" = 1 ]; then
        pg_ctlcluster --skip-systemctl-redirect "$v" main reload 2>&1 || true
      fi
    fi
  fi
  # Otherwise (not root, or not Debian's layout) the test helper and the main job initdb a
  # private cluster with the installed binaries.
  pg_answers || echo "setup: PostgreSQL does not answer on 127.0.0.1:$pg_port; the tests and the main job will start a private cluster" >&2
fi
