#!/usr/bin/env bash
# Managed by dsv4deploy — local changes are overwritten
# sglang-router (PD) for deepseek-v4-flash (dsv4deploy): sglang-dsv4-router (role router) on host gpu1.
# sglang-router in PD mode: sends each request to a prefill and a decode worker at once.
# Gate on its /readiness (200 only once a prefill and a decode are healthy), not /health.
# Every value below is shell-quoted; the script execs the server so the service manager
# supervises (and signals) the server itself, not this shell.
set -euo pipefail

cd /opt/dsv4deploy/current

# The API key is read at start from a file (readable by the service user only) and never written into this script, the
# unit or the release. It does appear in the server's argv: sglang takes it only as --api-key.
api_key_file=/etc/dsv4deploy/api_key
if [[ ! -r "$api_key_file" ]]; then
  echo 'sglang-dsv4-router: cannot read the API key file' "$api_key_file" >&2
  exit 1
fi
api_key="$(<"$api_key_file")"
if [[ -z "$api_key" ]]; then
  echo 'sglang-dsv4-router: the API key file is empty' "$api_key_file" >&2
  exit 1
fi

exec python3 -m sglang_router.launch_router \
  --pd-disaggregation \
  --prefill http://10.0.0.11:30001 8998 \
  --decode http://10.0.0.11:30002 \
  --host 0.0.0.0 \
  --port 8000 \
  --retry-max-retries 3 \
  --retry-initial-backoff-ms 100 \
  --retry-max-backoff-ms 2000 \
  --cb-failure-threshold 30 \
  --cb-timeout-duration-secs 10 \
  --health-check-endpoint /health \
  --health-check-interval-secs 10 \
  --health-failure-threshold 3 \
  --health-check-timeout-secs 5 \
  --worker-startup-timeout-secs 1800 \
  --worker-startup-check-interval 1 \
  --prometheus-port 29000 \
  --prometheus-host 127.0.0.1 \
  --shutdown-grace-period-secs 60 \
  --api-key "$api_key"
