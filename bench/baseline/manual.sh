#!/usr/bin/env bash
# The seeds' manual PD switchover and verification, as an engineer ran it by hand, scripted step by
# step against the same simulated host, serve scripts, settings and needle grid as `python -m bench`.
# Nothing here is ours but the serve scripts of the release it starts (the seeds' hand-written ones).
#
#   bench/baseline/manual.sh WORKDIR
#
# WORKDIR holds what the harness prepared before the clock started (bench/baseline/prepare.py):
#   env        BIN (the release's bin/), ROUTER (URL), MODEL, KEY_FILE, SMI (nvidia-smi command line)
#   pids/      one pid file per running service (what `systemctl stop` would find)
#   needle/    one chat request per needle cell (NN.json) and the code it hides (NN.code)
#   soak       the tool-call soak's settings as `dsv4deploy gate soak` options (the deploy's own:
#              sessions, turns, concurrency, corruption limit), or absent when the deploy ran none
# It prints what the engineer saw and ends with `VERIFIED` (exit 0) or what failed (exit 1).
set -u
work=$1
# shellcheck source=/dev/null
. "$work/env"
auth="Authorization: Bearer $(cat "$KEY_FILE")"

# 1. Stop the PD services, router first (systemctl stop: TERM, wait for the process to go).
for svc in router decode prefill; do
  pidfile="$work/pids/$svc"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$pidfile"
done

# 2. Give the GPUs a moment, then check their memory is back (the seeds: ~4 MiB each).
sleep 3
$SMI --query-gpu=index,memory.used --format=csv

# 3. Start prefill, decode and router (systemctl start returns at once).
for svc in prefill decode router; do
  nohup bash "$BIN/serve-sglang-dsv4-$svc.sh" > "$work/$svc.log" 2>&1 &
  echo $! > "$work/pids/$svc"
done

# 4. Wait for the router to list the model: /v1/models every 5 s, 120 tries (10 minutes).
ready=""
for i in $(seq 1 120); do
  if curl -s -m 5 -H "$auth" "$ROUTER/v1/models" | grep -q "\"$MODEL\""; then
    ready=$i
    echo "READY after $((i * 5)) s"
    break
  fi
  sleep 5
done
[ -n "$ready" ] || { echo "router never listed $MODEL"; exit 1; }

# 5. Is the override in both servers' logs?
grep -o "json_model_override_args[^,]*" "$work/prefill.log" "$work/decode.log"

# 6. Smoke: one request, the answer pulled out by a one-liner. A failure (the seeds' KeyError:
# 'choices') is looked at and the command run again, as the engineer did.
smoke() {
  curl -s -m 60 -H "$auth" -H "Content-Type: application/json" "$ROUTER/v1/chat/completions" \
    -d "{\"model\": \"$MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"Say OK\"}], \"max_tokens\": 20}" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["choices"][0]["message"]["content"])'
}
for i in $(seq 1 60); do
  if smoke; then break; fi
  [ "$i" -lt 60 ] || { echo "smoke never answered"; exit 1; }
  sleep 5
done

# 7. The needle cells, one after another.
missed=0
for req in "$work"/needle/*.json; do
  code=$(cat "${req%.json}.code")
  answer=$(curl -s -m 300 -H "$auth" -H "Content-Type: application/json" "$ROUTER/v1/chat/completions" -d @"$req" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["choices"][0]["message"]["content"])')
  if printf '%s' "$answer" | grep -q "$code"; then
    echo "$(basename "$req"): recalled"
  else
    echo "$(basename "$req"): MISSED ($answer)"
    missed=$((missed + 1))
  fi
done
[ "$missed" -eq 0 ] || { echo "needle: $missed cell(s) missed"; exit 1; }

# 8. The tool-call soak, after the needle (the seeds ran their reproduction script, repro_agent.py, by
# hand once the server answered): the same multi-turn tool-calling load the deploy's soak gate runs.
if [ -f "$work/soak" ]; then
  # shellcheck disable=SC2046
  dsv4deploy gate soak --url "$ROUTER" --model "$MODEL" --api-key-file "$KEY_FILE" $(cat "$work/soak") \
    || { echo "soak: failed"; exit 1; }
fi
echo VERIFIED
