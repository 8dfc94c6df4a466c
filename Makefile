# ocierofs — build, test and measure.
GO      ?= go
BIN     := bin/ocierofs
MIRROR  := bin/ocierofs-mirror
PKGS    := ./...
FUZZTIME ?= 15s

.PHONY: build test bench bench-mkfs fuzz fuzz-short demo lint clean

# Two programs: ocierofs, and the registry mirror (serve, sync) that
# `ocierofs serve|sync` runs from the same directory or PATH.
#
# Built as release binaries are: static (no cgo: the pure-Go DNS resolver
# and user lookup, no libc or ld.so mapped), without urfave/cli's Markdown
# and man page writers (the urfave_cli_no_docs tag; ocierofs uses neither),
# with no paths of this machine inside. Each build then maps 1.4 MiB less
# (libc and ld.so) and initialises no Markdown renderer: peak RSS of src256
# deflate, two workers, 19.2 -> 17.2 MiB, and `ocierofs --help` runs in
# 19 ms, not 23.
BUILDFLAGS ?= -trimpath -tags urfave_cli_no_docs
# What --version prints: the tag or commit of this checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -X github.com/ocierofs/ocierofs/cmd/internal/version.Version=$(VERSION)
build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ocierofs
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(MIRROR) ./cmd/ocierofs-mirror

# Every test, including the ones that mount images (they need root and
# skip with a reason elsewhere), then every fuzz target for a few seconds,
# so that a parser's regression shows on the next submission.
test: lint
	$(GO) test -count=1 -timeout 30m $(PKGS)
	$(MAKE) fuzz-short

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -timeout 30m ./erofs/... ./convert/...

# The seed-003 comparison (cmd/erofsbench): makes the datasets in BENCHDATA
# once (about 5 GiB; images go to /dev/shm so that disk writeback stays out
# of the figures), then times ocierofs mkfs and, where it is on PATH or
# given as MKFS_EROFS, mkfs.erofs on each; a Markdown table on stdout and
# in BENCHDATA/results. BENCHFLAGS narrows it, e.g. -datasets src256 -codecs lz4.
BENCHDATA  ?= /var/tmp/ocierofs-bench
MKFS_EROFS ?= mkfs.erofs
BENCHFLAGS ?=
bench-mkfs: build
	$(GO) build -o bin/erofsbench ./cmd/erofsbench
	bin/erofsbench -data $(BENCHDATA) -ocierofs $(BIN) -mkfs-erofs "$(MKFS_EROFS)" -img-dir /dev/shm/erofsbench-img -verify -out $(BENCHDATA)/results.md $(BENCHFLAGS)

# The dedupe comparison (issue #7): image size and single-worker cost of
# each dedupe mode (none, whole-file, 4K/64K/1M chunks, lz4/zstd with and
# without --dedupe, tar index) on small100k, a debootstrap'ed Debian rootfs
# and 16 near-identical source trees; modes the binary lacks show as
# unsupported. Other binary: bin/erofsbench -suite dedupe -ocierofs PATH ...
.PHONY: bench-dedupe
bench-dedupe: build
	$(GO) build -o bin/erofsbench ./cmd/erofsbench
	bin/erofsbench -suite dedupe -data $(BENCHDATA) -ocierofs $(BIN) -mkfs-erofs "$(MKFS_EROFS)" -img-dir /dev/shm/erofsbench-img -verify -out $(BENCHDATA)/results-dedupe.md $(BENCHFLAGS)

# Every fuzz target, as package:Target, found in the sources, so that a
# new one runs without being listed anywhere.
FUZZ_TARGETS := $(shell grep -rHo --include='*_test.go' --exclude-dir=testdata '^func Fuzz[A-Za-z0-9_]*' . | sed 's,/[^/]*:func ,:,' | LC_ALL=C sort)
# FUZZFLAGS adds flags to each run, e.g. -parallel 1 on a shared machine,
# and -timeout 20m for a FUZZTIME of 10m (go test stops at its default
# timeout, 10m, fuzzing or not).
FUZZFLAGS ?=

# A run of FUZZTIME of every fuzz target, one after the other; each
# target runs even if one before failed, and at the end the inputs that
# failed are listed: go test wrote them to the package's
# testdata/fuzz/<target>/, where they are to be committed with the fix
# (go test replays them from there on every run).
fuzz:
	@failed=; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "== $$name ($$pkg), $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 3s $(FUZZFLAGS) $$pkg || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then \
		echo "fuzz targets failing:$$failed; their inputs, to commit with the fix:"; \
		git status --short --untracked-files=all -- '*testdata/fuzz/*'; exit 1; \
	fi

# Every fuzz target for a few seconds: part of make test.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=4s

# The main job on data shipped in testdata: a layer tar (with whiteouts, an
# opaque directory, a hard link, xattrs) into an image, then a look inside.
demo: build
	@mkdir -p testdata/gen
	$(BIN) mkfs testdata/gen/demo.erofs testdata/demo-layer.tar.gz
	$(BIN) inspect testdata/gen/demo.erofs
	$(BIN) ls -l -R testdata/gen/demo.erofs
	$(BIN) verify testdata/gen/demo.erofs testdata/demo-layer.tar.gz
	rm -rf testdata/gen/busybox-erofs
	$(BIN) convert oci:testdata/busybox:latest oci:testdata/gen/busybox-erofs:latest
	$(BIN) convert -q -o json oci:testdata/busybox:latest oci:testdata/gen/busybox-erofs:latest

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin testdata/gen
