#!/usr/bin/env bash
# Managed by dsv4deploy — local changes are overwritten
# SGLang combined server for deepseek-v4-flash (dsv4deploy): sglang-dsv4 (role combined) on host gpu1.
# Combined server: prefill and decode in one process, no KV transfer.
# Every value below is shell-quoted; the script execs the server so the service manager
# supervises (and signals) the server itself, not this shell.
set -euo pipefail

export CUDA_VISIBLE_DEVICES=0,1,2,3
export SGLANG_DSV4_BF16_INDEX_K=0
export SGLANG_SM120_MMA_FLASHMLA=1
export SGLANG_SM120_TRITON_INDEXER=1

cd /opt/dsv4deploy/current

# The API key is read at start from a file (readable by the service user only) and never written into this script, the
# unit or the release. It does appear in the server's argv: sglang takes it only as --api-key.
api_key_file=/etc/dsv4deploy/api_key
if [[ ! -r "$api_key_file" ]]; then
  echo 'sglang-dsv4: cannot read the API key file' "$api_key_file" >&2
  exit 1
fi
api_key="$(<"$api_key_file")"
if [[ -z "$api_key" ]]; then
  echo 'sglang-dsv4: the API key file is empty' "$api_key_file" >&2
  exit 1
fi

exec python3 -m sglang.launch_server \
  --model-path /models/DeepSeek-V4-Flash-NVFP4 \
  --served-model-name deepseek-v4-flash \
  --tp-size 4 \
  --base-gpu-id 0 \
  --host 0.0.0.0 \
  --port 30000 \
  --mem-fraction-static 0.8 \
  --enable-metrics \
  --json-model-override-args '{"index_topk":1024}' \
  --chat-template /models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja \
  --disable-prefill-cuda-graph \
  --disable-decode-cuda-graph \
  --reasoning-parser deepseek-v4 \
  --tool-call-parser deepseekv4 \
  --api-key "$api_key"
