#!/usr/bin/env bash
# Regenerates testdata/demo-layer.tar.gz: a small OCI layer with the things
# a converter must get right — whiteouts, an opaque directory, a hard link,
# xattrs, a setuid file, a symlink, a device, an implied parent directory.
# Needs root (mknod, chown, trusted.* xattrs) and GNU tar.
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)/demo-layer.tar.gz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
r="$work/root"
mkdir -p "$r/etc" "$r/usr/bin" "$r/var/cache/apt" "$r/opt/app" "$r/home/user"
printf 'demo\n' > "$r/etc/hostname"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' > "$r/etc/passwd"
printf '#!/bin/sh\necho hello from ocierofs\n' > "$r/usr/bin/hello"
chmod 0755 "$r/usr/bin/hello"
printf 'setuid helper\n' > "$r/usr/bin/su-helper"
chmod 4755 "$r/usr/bin/su-helper"
ln "$r/usr/bin/hello" "$r/usr/bin/hello-again"
ln -s hello "$r/usr/bin/hi"
head -c 100000 /dev/zero | tr '\0' 'x' > "$r/opt/app/data.bin"
setfattr -n user.origin -v demo "$r/opt/app/data.bin"
setfattr -n security.capability -v 0sAQAAAgAgAAAAAAAAAAAAAAAAAAA= "$r/usr/bin/hello"
mknod "$r/etc/null" c 1 3
chown -R 1000:1000 "$r/home/user"
printf 'notes\n' > "$r/home/user/notes.txt"
chown 1000:1000 "$r/home/user/notes.txt"
# OCI whiteouts: delete a file and a directory of a lower layer; make
# var/cache/apt opaque.
: > "$r/etc/.wh.motd"
: > "$r/.wh.tmp"
: > "$r/var/cache/apt/.wh..wh..opq"
find "$r" -exec touch -h -d '2024-01-02 03:04:05' {} +
# srv/www is implied: only its file is listed.
mkdir -p "$work/extra/srv/www"
printf '<h1>hi</h1>\n' > "$work/extra/srv/www/index.html"
touch -d '2024-01-02 03:04:05' "$work/extra/srv/www/index.html"
tarflags=(--sort=name --format=pax --numeric-owner --xattrs --xattrs-include='*'
	--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
tar "${tarflags[@]}" -cf "$work/layer.tar" -C "$r" .
tar "${tarflags[@]}" -rf "$work/layer.tar" -C "$work/extra" srv/www/index.html
gzip -n -9 < "$work/layer.tar" > "$out"
echo "wrote $out"
