#!/bin/sh
# mkfixtures.sh regenerates the reader's fixture images with Debian's
# mkfs.erofs 1.5 (apt-get install erofs-utils). Run it as root from any
# directory: it needs chown, mknod and trusted.* xattrs. The images are
# committed, so the tests never need mkfs.erofs; the expected values in
# reader_test.go mirror what this script builds.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

T=1700000000
UUID=11111111-2222-3333-4444-555555555555

# pattern N prints N deterministic, not-all-zero bytes.
pattern() {
	python3 -c 'import sys; n=int(sys.argv[1]); sys.stdout.buffer.write(bytes((i*7+i//251)&0xff for i in range(n)))' "$1"
}

# --- plain.img: FLAT_PLAIN / FLAT_INLINE, every file type, xattrs ----------
src=$work/plain
mkdir -p "$src/sub/deeper" "$src/many" "$src/opaque" "$src/sticky"
printf 'hello world\n' >"$src/hello.txt"
chown 1000:1000 "$src/hello.txt"
chmod 0640 "$src/hello.txt"
pattern 5000 >"$src/multi.bin"    # one full block + inline tail
pattern 4096 >"$src/block.bin"    # exactly one block: FLAT_PLAIN
: >"$src/empty"
printf 'deep\n' >"$src/sub/deeper/file"
printf 'owned\n' >"$src/sub/bigid"
chown 100000:200000 "$src/sub/bigid" # ids > 65535 force an extended inode
chmod 4755 "$src/sub/bigid"
chmod 2755 "$src/sub"
chmod 1777 "$src/sticky"
ln "$src/hello.txt" "$src/hardlink"
ln -s hello.txt "$src/link"
# A 3000-byte target that still resolves: 1495 "./" and "inline.txt".
printf 'inline\n' >"$src/inline.txt"
ln -s "$(python3 -c 'print("./"*1495 + "inline.txt", end="")')" "$src/longlink"
ln -s sub/deeper "$src/dirlink"
mkfifo "$src/fifo"
mknod "$src/null" c 1 3
mknod "$src/sda1" b 8 17
mknod "$src/whiteout" c 0 0
: >"$src/many/f000"
i=1
while [ $i -lt 300 ]; do
	ln "$src/many/f000" "$src/many/$(printf 'f%03d' $i)"
	i=$((i + 1))
done
setfattr -n user.foo -v bar "$src/hello.txt"
setfattr -n user.shared -v same "$src/hello.txt"
setfattr -n user.shared -v same "$src/multi.bin"
setfattr -n user.shared -v same "$src/block.bin"
setfattr -n trusted.overlay.opaque -v y "$src/opaque"
setfattr -n security.test -v label "$src/block.bin"
setfacl -m u:1234:r "$src/multi.bin"
touch -h -d @$T "$src" "$src"/* "$src"/*/* "$src/sub/deeper/file"
mkfs.erofs --quiet -T$T -U $UUID -x1 "$work/plain.img" "$src"
cp "$work/plain.img" "$here/plain.img"

# --- chunk.img: CHUNK_BASED with a 4-byte block map and a hole ------------
src=$work/chunk
mkdir -p "$src"
pattern 10000 >"$src/data.bin"
truncate -s 20480 "$src/sparse.bin"
pattern 4096 | dd of="$src/sparse.bin" bs=4096 seek=2 conv=notrunc status=none
printf 'small\n' >"$src/small.txt"
touch -h -d @$T "$src" "$src"/*
mkfs.erofs --quiet -T$T -U $UUID --chunksize=4096 "$work/chunk.img" "$src"
cp "$work/chunk.img" "$here/chunk.img"

# --- blob.img + blob.dev: 8-byte chunk indexes on an extra device ---------
mkfs.erofs --quiet -T$T -U $UUID --chunksize=4096 --blobdev="$work/blob.dev" "$work/blob.img" "$src"
cp "$work/blob.img" "$here/blob.img"
cp "$work/blob.dev" "$here/blob.dev"
