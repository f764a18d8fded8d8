#!/usr/bin/env bash
# The fleet's calibration of auto_k, from every replica's logs into the plugin's configuration
# (docs/book/src/operate/fleet.md):
#
#   deploy/fleet/calibrate.sh [--max-k N] [--dry-run] istio NAMESPACE WASMPLUGIN LOG...
#   deploy/fleet/calibrate.sh [--max-k N] [--dry-run] envoy-gateway NAMESPACE POLICY LOG...
#
# LOG: access logs (JSON lines) or the OpenTelemetry Collector's file exporter output, of any
# number of replicas; `-` reads standard input (for example `kubectl logs -l app=gateway`).
# `toolsift calibrate` counts them; the calibration then goes into
#   istio:          the WasmPlugin's spec.pluginConfig.auto_k.calibration (a merge patch);
#   envoy-gateway:  the EnvoyExtensionPolicy's spec.wasm[0].config.auto_k.calibration (a JSON
#                   patch; the plugin's config must have `auto_k`).
# The control plane pushes it to every replica by ECDS, without restarting Envoy.
# --dry-run prints the patch instead of applying it. TOOLSIFT and KUBECTL name the binaries
# (default: from PATH).
set -euo pipefail

usage() {
	sed -n '4,5p' "$0" | sed 's/^#   //' >&2
	exit 2
}

max_k=64
dry_run=false
while [ $# -gt 0 ]; do
	case "$1" in
	--max-k) max_k="${2:?--max-k needs a number}"; shift 2 ;;
	--dry-run) dry_run=true; shift ;;
	--) shift; break ;;
	-*) usage ;;
	*) break ;;
	esac
done
[ $# -ge 4 ] || usage
kind="$1" namespace="$2" name="$3"
shift 3

calibration="$("${TOOLSIFT:-toolsift}" calibrate --max-k "$max_k" "$@")"

case "$kind" in
istio)
	resource=wasmplugin type=merge
	patch="{\"spec\":{\"pluginConfig\":{\"auto_k\":{\"calibration\":$calibration}}}}"
	;;
envoy-gateway)
	resource=envoyextensionpolicy type=json
	patch="[{\"op\":\"add\",\"path\":\"/spec/wasm/0/config/auto_k/calibration\",\"value\":$calibration}]"
	;;
*) usage ;;
esac

if $dry_run; then
	printf '%s\n' "$patch"
else
	"${KUBECTL:-kubectl}" patch "$resource" "$name" -n "$namespace" --type "$type" -p "$patch"
fi
