#!/usr/bin/env bash
# Sets up everything dsv4deploy and its tests need on a fresh Debian/Ubuntu machine with Python 3.11+:
#   .venv/                 the tool, ansible-core, the real sglang-router and supervisord, test tools
#   contract venv (cached) the real sglang 0.5.23 and sglang-router 0.3.2 argument parsers, CPU-only
# Idempotent: a second run only checks. Set DSV4_SKIP_CONTRACT=1 to skip the large contract venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}

log() { printf '[setup] %s\n' "$*" >&2; }

# systemd-analyze (unit verification) and bash are the only system tools the tests use.
if ! command -v systemd-analyze >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing systemd (for systemd-analyze verify)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
log "installing dsv4deploy with its test, sim and plot extras into .venv"
.venv/bin/pip install -q -e '.[test,sim,plot]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import dsv4deploy, ansible, sglang_router, supervisor' \
  || { log "the .venv install is incomplete"; exit 1; }

if [ "${DSV4_SKIP_CONTRACT:-0}" != 1 ]; then
  # The contract venv holds torch (CPU) and sglang without its GPU dependency tree: ~2.4 GB, so it
  # lives in a cache keyed by the pinned requirements and is built once per machine.
  req=tests/contract/requirements-nodeps.txt
  key=$(cat "$req" | sha256sum | cut -c1-12)
  dir=${DSV4_CONTRACT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dsv4deploy/contract-venv-$key}
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c 'import sglang.srt.server_args, sglang_router.router_args' 2>/dev/null; then
    log "building the contract venv in $dir (once per machine; about 2.4 GB)"
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/pip" install -q torch==2.13.0 2>&1 | grep -v '^WARNING: Location' || true
    "$dir/bin/pip" install -q --no-deps -r "$req" 2>&1 | grep -v '^WARNING: Location' || true
    "$dir/bin/python" -c 'import sglang.srt.server_args, sglang_router.router_args'
  fi
  ln -sfn "$dir" .contract-venv
fi
log "ready"
