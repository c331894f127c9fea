#!/usr/bin/env bash
# Builds the gateway's container image from deploy/Containerfile with
# buildah, and with --check proves it runs.
#
#   scripts/image.sh [TAG]          build TAG (default localhost/sluice:VERSION,
#                                   VERSION from git describe) into buildah's
#                                   usual storage; push it with buildah push
#   scripts/image.sh --check        build into a throwaway store, check the
#                                   image's metadata, run its binary (--help,
#                                   check-config, and serve in front of mock,
#                                   asking the admin listener's /healthz and
#                                   /readyz), then remove everything (CI)
#
# The base is FROM scratch: no base image is pulled, so the binary is built
# here (CGO_ENABLED=0, -trimpath) and the CA certificates are this host's.
# There is no RUN step, so the isolation buildah would use for one does not
# matter; chroot works where no container runtime can start (a sandbox, a
# CI runner as root). STORAGE_DRIVER (buildah's own variable) picks the
# storage driver for a plain build; --check uses vfs, which works anywhere.
#
# Needs buildah (Debian: apt-get install buildah) and, for --check, curl.
# SLUICE_BIN names a binary already built with CGO_ENABLED=0 -trimpath to
# use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
if [ "${1:-}" = --check ]; then
	check=true
	shift
fi
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
tag=${1:-localhost/sluice:${version//+/-}}

if ! command -v buildah >/dev/null; then
	echo "image.sh: buildah is not installed (Debian: apt-get install buildah)" >&2
	exit 1
fi
certs=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$certs" ]; then
	echo "image.sh: no CA certificates at $certs (Debian: apt-get install ca-certificates; or set SSL_CERT_FILE)" >&2
	exit 1
fi

work=$(mktemp -d)
buildah=(buildah)
ctr=
cleanup() {
	if [ -n "$ctr" ]; then
		"${buildah[@]}" umount "$ctr" >/dev/null 2>&1 || true
		"${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true
	fi
	if $check; then
		"${buildah[@]}" rmi --all --force >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
if $check; then
	# A store of its own, removed on exit: nothing is left in the host's.
	buildah=(buildah --root "$work/root" --runroot "$work/runroot" --storage-driver vfs)
fi

ctx=$work/context
mkdir -p "$ctx/state"
t0=$SECONDS
if [ -n "${SLUICE_BIN:-}" ]; then # built by the caller, the same way (scripts/ship-check.sh)
	cp "$SLUICE_BIN" "$ctx/sluice"
else
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/sluice" ./cmd/sluice
	echo "image.sh: binary built in $((SECONDS - t0))s ($(du -h "$ctx/sluice" | cut -f1))"
fi
cp "$certs" "$ctx/ca-certificates.crt"

t0=$SECONDS
"${buildah[@]}" build --quiet --isolation chroot --format oci \
	--label org.opencontainers.image.title=sluice \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
	--label org.opencontainers.image.source=https://github.com/sluicehq/sluice \
	-f deploy/Containerfile -t "$tag" "$ctx" >/dev/null
echo "image.sh: $tag built in $((SECONDS - t0))s ($("${buildah[@]}" images --format '{{.Size}}' "$tag"))"

if ! $check; then
	"${buildah[@]}" images "$tag"
	exit 0
fi

fail() {
	echo "image.sh: $*" >&2
	exit 1
}

# The metadata the chart and the docs rely on.
field() { "${buildah[@]}" inspect --type image --format "$1" "$tag"; }
user=$(field '{{.OCIv1.Config.User}}')
entrypoint=$(field '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}')
ports=$(field '{{range $p, $_ := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}')
env=$(field '{{range .OCIv1.Config.Env}}{{.}} {{end}}')
[ "$user" = 65532:65532 ] || fail "USER is $user, want 65532:65532"
[ "$entrypoint" = '/usr/local/bin/sluice serve ' ] || fail "ENTRYPOINT is $entrypoint, want /usr/local/bin/sluice serve"
[ "$ports" = '8080/tcp 9090/tcp ' ] || fail "EXPOSE is $ports, want 8080 and 9090"
grep -q 'XDG_STATE_HOME=/var/lib/sluice ' <<<"$env" || fail "ENV is $env, want XDG_STATE_HOME=/var/lib/sluice"

# Its files: the binary, the certificates, the state directory owned by the
# user, and no shell.
ctr=$("${buildah[@]}" from --quiet "$tag")
root=$("${buildah[@]}" mount "$ctr")
[ -x "$root/usr/local/bin/sluice" ] || fail "no /usr/local/bin/sluice in the image"
[ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || fail "no CA certificates in the image"
[ "$(stat -c %u:%g "$root/var/lib/sluice")" = 65532:65532 ] || fail "/var/lib/sluice is owned by $(stat -c %u:%g "$root/var/lib/sluice"), want 65532:65532"
[ ! -e "$root/bin/sh" ] || fail "the image has a shell"
files=$(cd "$root" && find . -type f | sort | tr '\n' ' ')
[ "$files" = "./etc/ssl/certs/ca-certificates.crt ./usr/local/bin/sluice " ] || fail "unexpected files in the image: $files"
echo "image.sh: metadata and files ok (user 65532:65532, entrypoint sluice serve, ports 8080 9090, no shell)"

# In a container of the image (chroot isolation: no container runtime and
# no namespaces needed), as the image's user: --help, and check-config on
# a file mounted in.
cat >"$work/sluice.yaml" <<'EOF'
upstream: {url: https://api.openai.com}
admission: {concurrency: 4}
EOF
chmod 0644 "$work/sluice.yaml"
# Each output is read whole before it is searched: under pipefail, grep -q
# leaving at its first match would end the writer with SIGPIPE and fail
# the pipeline whatever the output said.
out=$("${buildah[@]}" run --isolation chroot "$ctr" -- /usr/local/bin/sluice --help 2>&1) ||
	fail "sluice --help in a container of the image failed: $out"
grep -q '^  serve ' <<<"$out" || fail "sluice --help in a container of the image does not list serve: $out"
out=$("${buildah[@]}" run --isolation chroot -v "$work/sluice.yaml:/etc/sluice/sluice.yaml:ro" "$ctr" -- \
	/usr/local/bin/sluice check-config /etc/sluice/sluice.yaml 2>&1) ||
	fail "check-config in a container of the image failed: $out"
grep -q ': ok$' <<<"$out" || fail "check-config in a container of the image did not say ok: $out"
echo "image.sh: in a container of the image: sluice --help and check-config ok"

# serve in front of mock, each the image's own binary run from the image's
# filesystem as the image's user, not through buildah run: that holds a
# container's output until it exits and ends it with SIGKILL, so neither
# the addresses the two print nor a drain on SIGTERM could be seen through
# it. HOME is unset and XDG_STATE_HOME points into the image, as in a
# container; ports are the kernel's pick (each prints its address).
bin=$root/usr/local/bin/sluice
asuser=(setpriv --reuid 65532 --regid 65532 --clear-groups env -i "XDG_STATE_HOME=$root/var/lib/sluice")
# The user must reach the mount point to run the binary and write its state.
chmod 0755 "$work" "$work/root"
d=$root
while [ "$d" != "$work/root" ] && [ "$d" != / ]; do
	chmod o+x "$d"
	d=$(dirname "$d")
done
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop; cleanup' EXIT
addr() { # file, prefix: waits up to 10s for the line naming the address
	for _ in $(seq 100); do
		if a=$(grep -m1 -o "$2 on http://[^ ]*" "$1" 2>/dev/null); then
			echo "${a#*http://}"
			return 0
		fi
		sleep 0.1
	done
	cat "$1" >&2
	return 1
}
"${asuser[@]}" "$bin" mock --listen 127.0.0.1:0 --median 10ms >"$work/mock.out" 2>"$work/mock.err" &
pids+=($!)
mock=$(addr "$work/mock.out" "mock listening") || fail "mock from the image did not start: $(cat "$work/mock.err")"
"${asuser[@]}" "$bin" serve --upstream "http://$mock" --concurrency 2 --listen 127.0.0.1:0 --admin 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
pids+=("$serve_pid")
api=$(addr "$work/serve.out" "sluice listening") || fail "serve from the image did not start: $(cat "$work/serve.err")"
admin=$(grep -m1 -o 'admin http://[^)]*' "$work/serve.out")
admin=${admin#admin http://}
[ "$(curl -fsS "http://$admin/healthz")" = ok ] || fail "/healthz did not answer ok"
[ "$(curl -fsS "http://$admin/readyz")" = ready ] || fail "/readyz did not answer ready"
code=$(curl -sS -o "$work/answer" -w '%{http_code}' -H 'Content-Type: application/json' \
	-d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}' "http://$api/v1/chat/completions")
[ "$code" = 200 ] || fail "a chat completion through the gateway answered $code: $(cat "$work/answer")"
[ -e "$root/var/lib/sluice/sluice/batch.db" ] || fail "the Batch API's store was not created under XDG_STATE_HOME"
kill -TERM "$serve_pid"
wait "$serve_pid" || fail "serve did not exit 0 on SIGTERM: $(tail -5 "$work/serve.err")"
echo "image.sh: the image's binary served a call through mock; /healthz ok, /readyz ready, SIGTERM exit 0"
