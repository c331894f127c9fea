#!/usr/bin/env bash
# upload-rss.sh: peak RSS of `sluice serve` while N uploads of a SIZE_MB
# batch file reach POST /v1/files at once (curl, loopback, bbolt store).
# Prints each upload's status, the process's VmHWM before and after, and
# the peak of its anonymous memory (RssAnon, sampled every 20 ms: the
# heap and stacks; VmHWM also counts the store file's pages the process
# has mapped).
#   N=8 SIZE_MB=100 scripts/upload-rss.sh
# BOUND=1 keeps the default bounds (batch.max_uploads 4,
# batch.max_tenant_uploads 2), so that the uploads past them are refused;
# by default they are raised to N, so that all N are read at once.
# BATCH=1 then creates a batch of one of the files and waits for it to
# have validated (its lines read one at a time, its items queued a chunk
# at a time), and prints the peaks again.
set -euo pipefail
N=${N:-8}
SIZE_MB=${SIZE_MB:-100}
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/sluice" ./cmd/sluice
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 - "$dir/in.jsonl" "$SIZE_MB" <<'PY'
import sys
line = ('{"custom_id":"r%08d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"' + 'x' * 2500 + '"}]}}\n')
target = int(sys.argv[2]) * 1000 * 1000
with open(sys.argv[1], 'w') as f:
    n = 0
    while n * len(line % 0) < target:
        f.write(line % n); n += 1
PY
if [ -z "${BOUND:-}" ]; then
  printf 'upstream:\n  url: http://127.0.0.1:1\nbatch:\n  max_uploads: %d\n  max_tenant_uploads: %d\n  max_tenant_file_bytes: %d\n' \
    "$N" "$N" $(( (N + 1) * (SIZE_MB + 1) * 1000 * 1000 )) >"$dir/config.yaml"
  cfg=(--config "$dir/config.yaml")
else
  cfg=(--upstream http://127.0.0.1:1)
fi
"$dir/sluice" serve "${cfg[@]}" --concurrency 4 --listen 127.0.0.1:$port \
  --admin 127.0.0.1:$admin --batch-db "$dir/batch.db" 2>"$dir/log" &
pid=$!
for _ in $(seq 50); do curl -fs http://127.0.0.1:$admin/healthz >/dev/null && break; sleep 0.1; done
echo "file: $(stat -c %s "$dir/in.jsonl") bytes; before: $(grep VmHWM /proc/$pid/status)"
( peak=0; while kill -0 $pid 2>/dev/null; do
    a=$(awk '/RssAnon/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
    [ "${a:-0}" -gt "$peak" ] && peak=$a && echo "$peak" >"$dir/anon"
    sleep 0.02
  done ) &
sampler=$!
up=()
for i in $(seq "$N"); do
  curl -s -o /dev/null -w "upload $i: %{http_code} in %{time_total}s\n" http://127.0.0.1:$port/v1/files \
    -F purpose=batch -F "file=@$dir/in.jsonl" &
  up+=($!)
done
wait "${up[@]}" 2>/dev/null || true
echo "after:  $(grep VmHWM /proc/$pid/status); peak RssAnon: $(cat "$dir/anon") kB; store: $(stat -c %s "$dir/batch.db") bytes"
if [ -n "${BATCH:-}" ]; then
  fid=$(curl -s http://127.0.0.1:$port/v1/files?limit=1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  start=$(date +%s.%N)
  bid=$(curl -s http://127.0.0.1:$port/v1/batches -H 'Content-Type: application/json' \
    -d "{\"input_file_id\":\"$fid\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  while :; do
    st=$(curl -s http://127.0.0.1:$port/v1/batches/$bid | python3 -c 'import json,sys; b=json.load(sys.stdin); print(b["status"], b["request_counts"]["total"])')
    [ "${st%% *}" != validating ] && break
    sleep 0.2
  done
  echo "batch: $st after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s; $(grep VmHWM /proc/$pid/status); peak RssAnon: $(cat "$dir/anon") kB"
fi
kill $sampler 2>/dev/null || true
