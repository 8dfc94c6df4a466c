#!/usr/bin/env bash
# The registry example of the README, on the image shipped in testdata
# (make demo-registry): start a registry of its own (Debian's
# docker-registry) on $DEMO_REGISTRY, copy testdata/busybox into it with
# skopeo, convert it there, check the twin against its source, and stop the
# registry. Its storage stays in testdata/gen/registry.
set -euo pipefail
cd "$(dirname "$0")/.."
addr=${DEMO_REGISTRY:-127.0.0.1:5055}
bin=${BIN:-bin/ocierofs}
for tool in docker-registry skopeo; do
	if ! command -v "$tool" >/dev/null; then
		echo "demo-registry: $tool not found (Debian: apt-get install -y $tool)" >&2
		exit 1
	fi
done

dir=testdata/gen/registry
rm -rf "$dir"
mkdir -p "$dir/storage"
cat >"$dir/config.yml" <<END
version: 0.1
storage:
  filesystem:
    rootdirectory: $PWD/$dir/storage
http:
  addr: $addr
END
docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "demo-registry: docker-registry did not start:" >&2
		cat "$dir/log" >&2
		exit 1
	fi
	sleep 0.1
done

set -x
skopeo copy --quiet --dest-tls-verify=false oci:testdata/busybox:latest "docker://$addr/busybox:latest"
"$bin" convert --plain-http "$addr/busybox:latest"
"$bin" check --plain-http "$addr/busybox:latest-erofs"
