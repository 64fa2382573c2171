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

exec python3 -m sglang.launch_server \
  --model-path /models/DeepSeek-V4-Flash-NVFP4 \
  --served-model-name deepseek-v4-flash \
  --tp-size 4 \
  --base-gpu-id 0 \
  --host 0.0.0.0 \
  --port 30000 \
  --mem-fraction-static 0.8 \
  --json-model-override-args '{"index_topk":1024}' \
  --chat-template /models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja \
  --disable-prefill-cuda-graph \
  --disable-decode-cuda-graph \
  --reasoning-parser deepseek-v4 \
  --tool-call-parser deepseekv4
