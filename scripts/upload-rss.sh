#!/usr/bin/env bash
# upload-rss.sh: peak RSS of `sluice serve` while N uploads of a SIZE_MB
# batch file reach POST /v1/files at once (curl, loopback). Prints each
# upload's status and the process's VmHWM before and after.
#   N=8 SIZE_MB=100 scripts/upload-rss.sh
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
"$dir/sluice" serve --upstream http://127.0.0.1:1 --concurrency 4 --listen 127.0.0.1:$port \
  --admin 127.0.0.1:$admin --batch-db "$dir/batch.db" 2>"$dir/log" &
pid=$!
for _ in $(seq 50); do curl -fs http://127.0.0.1:$admin/healthz >/dev/null && break; sleep 0.1; done
echo "file: $(stat -c %s "$dir/in.jsonl") bytes; before: $(grep VmHWM /proc/$pid/status)"
for i in $(seq "$N"); do
  curl -s -o /dev/null -w "upload $i: %{http_code} in %{time_total}s\n" http://127.0.0.1:$port/v1/files \
    -F purpose=batch -F "file=@$dir/in.jsonl" &
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
echo "after:  $(grep VmHWM /proc/$pid/status)"
