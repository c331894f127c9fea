#!/usr/bin/env bash
# Checks the Helm chart (deploy/helm/sluice): helm lint, helm template with
# the default values and with three replicas on Redis
# (deploy/helm/sluice/ci/replicas-values.yaml), `sluice check-config` on the
# config file each renders into its ConfigMap, what the rendering must hold
# (probes on the admin listener, a Service without it, keys only from the
# Secret), and the values the chart must refuse.
#
# Helm is the Go module (helm.sh/helm/v3), compiled once into HELM_DIR
# (default: a cache directory kept between runs) and reused; set HELM to
# use a helm binary of your own instead.
set -euo pipefail
cd "$(dirname "$0")/.."

helm_version=v3.22.0
helm=${HELM:-}
if [ -z "$helm" ]; then
	dir=${HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/helm-$helm_version}
	helm=$dir/helm
	if [ ! -x "$helm" ]; then
		t0=$SECONDS
		mkdir -p "$dir"
		GOBIN=$dir go install "helm.sh/helm/v3/cmd/helm@$helm_version"
		echo "helm-check.sh: helm $helm_version compiled in $((SECONDS - t0))s"
	fi
fi
"$helm" version --short

chart=deploy/helm/sluice
replicas=$chart/ci/replicas-values.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "helm-check.sh: $*" >&2
	exit 1
}

"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" -f "$replicas"

if [ -n "${SLUICE_BIN:-}" ]; then # built by the caller (scripts/ship-check.sh)
	cp "$SLUICE_BIN" "$work/sluice"
else
	go build -o "$work/sluice" ./cmd/sluice
fi

# The config file in a rendered ConfigMap: the block under "sluice.yaml: |".
configOf() {
	awk '/^  sluice.yaml: \|$/ { on = 1; next } on && /^    / { print substr($0, 5); next } on { exit }' "$1"
}

check() { # name, helm template flags...
	local name=$1
	shift
	"$helm" template "$name" "$chart" "$@" >"$work/$name.yaml"
	"$helm" template "$name" "$chart" "$@" --show-only templates/configmap.yaml >"$work/$name-cm.yaml"
	configOf "$work/$name-cm.yaml" >"$work/$name-sluice.yaml"
	[ -s "$work/$name-sluice.yaml" ] || fail "$name: no sluice.yaml in the ConfigMap"
	"$work/sluice" check-config "$work/$name-sluice.yaml" || fail "$name: the ConfigMap's config does not validate"
	local all=$work/$name.yaml
	for want in 'path: /readyz' 'path: /healthz' 'prometheus.io/path: /metrics' 'readOnlyRootFilesystem: true' \
		'runAsNonRoot: true' 'kind: PodDisruptionBudget' 'args: ["--config", "/etc/sluice/sluice.yaml"]'; do
		grep -qF -- "$want" "$all" || fail "$name: the rendering lacks $want"
	done
	[ "$(grep -c 'port: admin' "$all")" -ge 2 ] || fail "$name: the probes are not on the admin port"
	"$helm" template "$name" "$chart" "$@" --show-only templates/service.yaml >"$work/$name-svc.yaml"
	if grep -qE '(name|targetPort): admin|9090' "$work/$name-svc.yaml"; then
		fail "$name: the Service exposes the admin listener"
	fi
	grep -qE '^    admin: :[0-9]+$' "$work/$name-cm.yaml" || fail "$name: admin is not bound on the pod's network"
	echo "helm-check.sh: $name: lint, template, check-config ok"
}

check defaults
check ci -f "$replicas"
grep -q 'secretKeyRef' "$work/ci.yaml" || fail "ci: the provider key is not read from the Secret"
grep -q 'url: redis://' "$work/ci-sluice.yaml" || fail "ci: no store.redis in the config"
grep -q 'kind: PodMonitor' "$work/ci.yaml" || fail "ci: no PodMonitor"

# The default rendering starts: serve reads it as the pod would, with only
# the addresses (loopback, ports the kernel picks) and the Batch API's file
# moved off the pod's paths; /readyz answers, and SIGTERM drains and exits 0.
"$work/sluice" serve --config "$work/defaults-sluice.yaml" --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
	--batch-db "$work/batch.db" >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
	grep -q 'admin http://' "$work/serve.out" 2>/dev/null && break
	kill -0 "$serve_pid" 2>/dev/null || fail "defaults: serve exited: $(cat "$work/serve.err")"
	sleep 0.1
done
admin=$(grep -m1 -o 'admin http://[^)]*' "$work/serve.out") || fail "defaults: serve did not start: $(cat "$work/serve.err")"
[ "$(curl -fsS "http://${admin#admin http://}/readyz")" = ready ] || fail "defaults: /readyz did not answer ready"
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "defaults: serve did not exit 0 on SIGTERM: $(tail -5 "$work/serve.err")"
echo "helm-check.sh: defaults: the rendered config starts (/readyz ready, SIGTERM exit 0)"

# Values the chart refuses, each with the value to change in its message.
refuses() { # expected message part, helm template flags...
	local want=$1
	shift
	if "$helm" template bad "$chart" "$@" >"$work/bad.out" 2>&1; then
		fail "rendered, want a refusal mentioning '$want': $*"
	fi
	grep -qF -- "$want" "$work/bad.out" || fail "refused without naming '$want': $(cat "$work/bad.out")"
}
refuses 'without redis.url' --set replicaCount=3
refuses 'keysSecret is empty' --set upstream.apiKeyEnv=OPENAI_API_KEY
refuses 'keysSecret is empty' --set redis.url=redis://r:6379 --set redis.passwordEnv=P
refuses 'config.listen' --set config.listen=0.0.0.0:1
refuses 'config.admin_pprof' --set config.admin_pprof=true
refuses 'upstream.url is required' --set upstream.url=
echo "helm-check.sh: refusals ok"
