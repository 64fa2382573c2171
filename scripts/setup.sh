#!/usr/bin/env bash
# Sets up everything dsv4deploy and its tests need on a fresh Debian/Ubuntu machine with Python 3.11+:
#   .venv/                 the tool, ansible-core, the real sglang-router and supervisord, test tools
#   .smg-venv (cached)     the Shepherd Model Gateway (smg 1.13.0), the other router; its own venv,
#                          because the sglang-router wheel also installs an `smg` command
#   .engine-venv (cached)  the real-engine tier: the real sglang 0.5.23 (and mooncake) served on CPU
#   contract envs (cached) the real argument parsers, CPU-only: sglang 0.5.23 and sglang-router 0.3.2
#                          (a venv), sglang 0.5.12 and 0.5.18 (package folders beside its torch)
# Idempotent: a second run only checks. Set DSV4_SKIP_CONTRACT=1 to skip the large contract envs.
#
# Usage: ./scripts/setup.sh [PART...]  with PART one of
#   tool      .venv and the smg venv (everything the tool, lint, sanity and the simulated tiers need)
#   contract  the contract envs            engine  the real-engine venv (and mooncake's libraries)
#   newest    .venv-newest
# No PART: tool, contract and engine (each unless its DSV4_SKIP_* is set), and newest when DSV4_NEWEST=1.
# The parts write disjoint folders, so CI builds contract, engine and newest in the background once
# tool is done (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}

log() { printf '[setup] %s\n' "$*" >&2; }
# apt-get (update above all) fails at once when another apt holds its lock: the parts built side by side, and
# the systemd tier's tool install (tests/systemd/hostkit.py), take this lock file around theirs.
apt_get() { DEBIAN_FRONTEND=noninteractive flock /run/lock/dsv4deploy-apt.lock apt-get "$@"; }

if [ $# = 0 ]; then
  parts=(tool)
  [ "${DSV4_SKIP_CONTRACT:-0}" = 1 ] || parts+=(contract)
  [ "${DSV4_SKIP_REAL_ENGINE:-0}" = 1 ] || parts+=(engine)
  [ "${DSV4_NEWEST:-0}" != 1 ] || parts+=(newest)
else
  parts=("$@")
fi
for part in "${parts[@]}"; do
  case $part in tool|contract|engine|newest) ;; *) log "unknown part '$part' (tool, contract, engine, newest)"; exit 2 ;; esac
done

cache=${XDG_CACHE_HOME:-$HOME/.cache}/dsv4deploy
key_of() { cat "$@" | sha256sum | cut -c1-12; }
# A venv of exactly the pinned set in $2 (installed without dependency resolution), built once: $1 its
# folder, $3 what it is (for the log), then the command that proves it works.
pinned_venv() {
  local dir=$1 req=$2 what=$3
  shift 3
  [ -f "$dir/.complete" ] && return 0
  log "building $what in $dir (once per machine)"
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/pip" install -q --no-deps -r "$req" 2>&1 | grep -v '^WARNING: Location' || true
  "$@" || { log "$what does not work: $* failed"; exit 1; }
  touch "$dir/.complete"
}

setup_tool() {
  # systemd-analyze (unit verification), bash and promtool (below) are the system tools the tests use.
  if ! command -v systemd-analyze >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing systemd (for systemd-analyze verify)"
    apt_get update -qq && apt_get install -y -qq systemd >/dev/null
  fi
  # Debian's Prometheus and node_exporter: promtool checks the generated monitoring files, and the tests start
  # their own binaries (loopback, temporary storage). Their services are not started: PID 1 is no init
  # here, so invoke-rc.d refuses (the image's policy-rc.d denies it too).
  if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing prometheus and prometheus-node-exporter (promtool, the monitoring tests)"
    apt_get update -qq && apt_get install -y -qq prometheus prometheus-node-exporter >/dev/null
  fi

  if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
  fi
  log "installing dsv4deploy with its test, sim, plot and mitogen extras into .venv"
  .venv/bin/pip install -q -e '.[test,sim,plot,mitogen]' 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c 'import dsv4deploy, ansible, sglang_router, supervisor, prometheus_client' \
    || { log "the .venv install is incomplete"; exit 1; }

  # smg (~150 MB, seconds to build) is always set up: `-e router_implementation=smg` on the embedded
  # host runs it. Pinned without dependency resolution, so every machine gets the same set.
  req=scripts/requirements-smg.txt
  smg=${DSV4_SMG_VENV:-$cache/smg-venv-$(key_of "$req")}
  pinned_venv "$smg" "$req" "the smg venv" "$smg/bin/python" -c 'import smg.launch_router'
  ln -sfn "$smg" .smg-venv
}

setup_contract() {
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
    # Older sglang parsers: sglang without dependencies plus the light packages they import, in a
    # folder the harness puts first on PYTHONPATH of the 0.5.23 venv's python (its torch is reused).
    for version in 0.5.12 0.5.18; do
      req=tests/contract/requirements-sglang-$version.txt
      pkgs=$cache/contract-sglang-$version-$(key_of "$req")
      if [ ! -f "$pkgs/.complete" ]; then
        log "building the sglang $version parser folder in $pkgs (once per machine)"
        rm -rf "$pkgs"
        "$dir/bin/pip" install -q --no-deps --target "$pkgs" -r "$req" 2>&1 | grep -v '^WARNING: Location' || true
        PYTHONPATH="$pkgs:tests/contract/stubs" "$dir/bin/python" -c 'import sglang.srt.server_args' \
          || { log "sglang $version's parser does not import from $pkgs"; exit 1; }
        touch "$pkgs/.complete"
      fi
      ln -sfn "$pkgs" ".contract-sglang-$version"
    done
}

# The real-engine tier (tests/real_engine): the unmodified PyPI sglang 0.5.23 served on CPU, with its
# runtime dependencies but none of its GPU kernels; ~6 GB (torch is sglang's CUDA build, which runs on
# CPU), so it lives in a cache keyed by its pinned requirements and is built once per machine. Its PD
# transfer (mooncake) needs Debian's verbs libraries. DSV4_SKIP_REAL_ENGINE=1 skips it (the tier then
# skips, saying so).
setup_engine() {
    if ! ldconfig -p 2>/dev/null | grep -q libibverbs.so.1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      log "installing libibverbs1 librdmacm1 libnuma1 (mooncake's PD transfer, real-engine tier)"
      (apt_get install -y -qq libibverbs1 librdmacm1 libnuma1 >/dev/null 2>&1 \
        || { apt_get update -qq && apt_get install -y -qq libibverbs1 librdmacm1 libnuma1 >/dev/null; }) \
        || log "could not install the verbs libraries: the real-engine tier's PD tests will skip"
    fi
    req=tests/real_engine/requirements.txt
    engine=${DSV4_ENGINE_VENV:-$cache/engine-venv-$(key_of "$req")}
    pinned_venv "$engine" "$req" "the real-engine venv (about 6 GB, a few minutes)" \
      env SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=tests/real_engine/stand_in "$engine/bin/python" -c 'import sglang.launch_server'
    ln -sfn "$engine" .engine-venv
    # The tier's engine wheelhouse (test_engine_upgrade.py): sglang's own wheel only, installed by `engine:` into a
    # venv layered on the real-engine venv (its torch and every dependency), as an operator's wheelhouse would be.
    wheels=$cache/engine-wheelhouse-sglang-0.5.23
    if ! ls "$wheels"/sglang-0.5.23-*.whl >/dev/null 2>&1; then
      log "downloading sglang 0.5.23's wheel into $wheels (about 40 MB)"
      "$engine/bin/pip" download -q --no-deps -d "$wheels" sglang==0.5.23 2>&1 | grep -v '^WARNING: Location' || true
    fi
    ln -sfn "$wheels" .engine-wheelhouse
}
# The newest ansible-core needs Python 3.12+: a second venv, .venv-newest, for the CI tier that runs the
# unit tests and one gated deploy on it (the part newest, or DSV4_NEWEST=1; PYTHON_NEWEST names the interpreter).
setup_newest() {
    newest=${PYTHON_NEWEST:-}
    if [ -z "$newest" ]; then
      # The first that really runs (a pyenv shim may name a version it does not select).
      for c in python3.12 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python \
               "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python; do
        if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then newest=$c; break; fi
      done
    fi
    [ -n "$newest" ] || { log "no Python 3.12+ found for .venv-newest: set PYTHON_NEWEST"; exit 1; }
    [ -x .venv-newest/bin/python ] || { log "creating .venv-newest with $newest"; "$newest" -m venv .venv-newest; }
    log "installing dsv4deploy with the newest ansible-core into .venv-newest"
    .venv-newest/bin/pip install -q -e '.[sim]' 'ansible-core>=2.21' pytest pytest-xdist pytest-rerunfailures hypothesis antsibull-changelog 2>&1 | grep -v '^WARNING: Location' || true
    .venv-newest/bin/python -c 'import dsv4deploy, ansible, sglang_router, supervisor' \
      || { log "the .venv-newest install is incomplete"; exit 1; }
}

for part in "${parts[@]}"; do "setup_$part"; done
log "ready: ${parts[*]}"
