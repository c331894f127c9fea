#!/usr/bin/env bash
# The deployment artefacts' checks, as .ci/run runs them (and anyone can,
# alone): the container image built with buildah and run from its own
# filesystem (scripts/image.sh --check), the Helm chart linted, rendered
# and its config validated (scripts/helm-check.sh), and the systemd unit
# verified (scripts/systemd-check.sh). Each step's wall time is printed.
#
# buildah and curl are installed from Debian when missing, and a machine
# that cannot build or run the image fails the run: that step never skips.
# The systemd check needs systemd-analyze (Debian's systemd package, on the
# project's machines), which is not installed for it: where it is missing
# that one step says so and is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { # name, command...
	local name=$1 t0=$SECONDS
	shift
	"$@"
	echo "ship-check.sh: $name took $((SECONDS - t0))s"
}

install_missing() {
	local missing=()
	command -v buildah >/dev/null || missing+=(buildah)
	command -v curl >/dev/null || missing+=(curl)
	[ ${#missing[@]} -gt 0 ] || return 0
	local sudo=()
	[ "$(id -u)" = 0 ] || sudo=(sudo)
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

step "installing buildah and curl (when missing)" install_missing
# One binary for the three checks, built as the image's is.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
export SLUICE_BIN=$bin/sluice
step "building sluice (CGO_ENABLED=0, -trimpath)" env CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$SLUICE_BIN" ./cmd/sluice
step "the image (scripts/image.sh --check)" scripts/image.sh --check
step "the Helm chart (scripts/helm-check.sh)" scripts/helm-check.sh
if command -v systemd-analyze >/dev/null; then
	step "the systemd unit (scripts/systemd-check.sh)" scripts/systemd-check.sh
else
	echo "ship-check.sh: SKIPPED the systemd unit's check: no systemd-analyze (Debian: package systemd)"
fi
