# ocierofs — build, test and measure.
GO      ?= go
BIN     := bin/ocierofs
MIRROR  := bin/ocierofs-mirror
PKGS    := ./...
FUZZTIME ?= 15s

.PHONY: build install test test-deps docs spec-vectors bench bench-mkfs bench-convert fuzz fuzz-short demo demo-registry lint clean

# Two programs: ocierofs, and the registry mirror (serve, sync) that
# `ocierofs serve|sync` runs from the same directory or PATH.
#
# Built as release binaries are: static (no cgo: the pure-Go DNS resolver
# and user lookup, no libc or ld.so mapped), without urfave/cli's Markdown
# and man page writers (the urfave_cli_no_docs tag; ocierofs uses neither),
# with no paths of this machine inside (docs/performance.md has what that
# saves).
BUILDFLAGS ?= -trimpath -tags urfave_cli_no_docs
# What --version prints: the tag or commit of this checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -X github.com/ocierofs/ocierofs/cmd/internal/version.Version=$(VERSION)
build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ocierofs
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(MIRROR) ./cmd/ocierofs-mirror

# Both programs into $(DESTDIR)$(PREFIX)/bin.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
install: build
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(BIN) $(MIRROR) $(DESTDIR)$(BINDIR)/

# Every test, including the ones that mount images (they need root and
# skip with a reason elsewhere), then every fuzz target for a few seconds,
# so that a parser's regression shows on the next submission. On a fresh
# machine, make test-deps first.
test: lint
	$(GO) test -count=1 -timeout 30m $(PKGS)
	@# deploy/ is a module of its own (the Kubernetes API types of its tests).
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...
	$(MAKE) fuzz-short

# What the full tests need, installed without running them (Debian, as
# root; .ci/run runs this, then make test):
#
# erofs-utils: Debian's fsck.erofs/mkfs.erofs 1.5, an independent checker and
# image source; tar/gzip/zstd make and unpack test layers; xz decodes our
# MicroLZMA streams as an independent LZMA reader; attr and acl for xattrs;
# umoci unpacks images for the layer-stacking comparison; docker-registry is
# the real registry the convert tests push to and pull from; runc and
# busybox-static (a static /bin/busybox, the program of the test containers)
# for the containerd end-to-end tests; cryptsetup-bin for veritysetup, which
# checks our dm-verity trees (format, verify); GNU time, which erofsbench
# measures peak RSS with (its test checks that).
TEST_PACKAGES := erofs-utils tar gzip zstd xz-utils attr acl umoci docker-registry \
	util-linux kmod ca-certificates git make cryptsetup-bin runc busybox-static time
# containerd for the end-to-end tests (convert/containerd_test.go), built
# once into the cache directory the tests look in, then reused.
CONTAINERD_VERSION := v2.4.2
test-deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make test-deps installs Debian packages and loads kernel modules: run it as root" >&2; exit 1; fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TEST_PACKAGES) >/dev/null
	@# The tests start their own registry; stop the one the package starts.
	systemctl stop docker-registry 2>/dev/null || service docker-registry stop 2>/dev/null || true
	modprobe erofs 2>/dev/null || true
	modprobe loop 2>/dev/null || true
	modprobe overlay 2>/dev/null || true
	modprobe fuse 2>/dev/null || true
	$(GO) version
	$(GO) mod download
	cd deploy && $(GO) mod download
	@set -e; dir="$${OCIEROFS_CACHE:-$${HOME:-/root}/.cache/ocierofs}/containerd-$(CONTAINERD_VERSION)"; \
	if ! [ -x "$$dir/containerd" ] || ! [ -x "$$dir/ctr" ] || ! [ -x "$$dir/containerd-shim-runc-v2" ]; then \
		echo "building containerd $(CONTAINERD_VERSION) into $$dir"; \
		mkdir -p "$$dir"; \
		GOBIN="$$dir" $(GO) install $(foreach c,containerd ctr containerd-shim-runc-v2,github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD_VERSION)); \
	fi; \
	"$$dir/containerd" --version

# docs/cli.md and docs/cli-mirror.md, from the command definitions; their
# test (TestCLIDoc) fails when a flag changed and this was not run.
docs:
	UPDATE_DOCS=1 $(GO) test -count=1 -run '^TestCLIDoc$$' ./cmd/ocierofs ./cmd/ocierofs-mirror

# The EROFS image spec's test vectors in testdata/spec, made anew: a
# source image and an OCI layout of its conversion per feature. The test
# that makes them checks that the committed ones are what it makes.
spec-vectors:
	UPDATE_SPEC_VECTORS=1 $(GO) test -count=1 -run '^TestSpecVectors$$' ./cmd/ocierofs

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

# The registry-to-registry comparison (convert/convertbench_test.go):
# ocierofs convert SRC DST against ctr images convert --oci --erofs raw
# (running MKFS_EROFS, 1.7 or later) plus ctr images push, on a registry
# and a containerd 2.4 of its own (make test-deps builds containerd), as
# root. Three images: the end-to-end tests' four small layers, four gzip
# layers of this Debian host's files, and the Linux tree of BENCHDATA
# (tar/linux.tar, as make bench-mkfs or bin/erofsbench -gen-only makes it)
# as one layer. Medians of 3, the tools taking turns; wall and CPU time of
# each tool and of the registries; the report on stdout and in
# BENCHDATA/results-convert.md. CONVERT_BENCHFLAGS are environment settings
# of the test, e.g. OCIEROFS_BENCH_IMAGES=linux OCIEROFS_BENCH_RUNS=5.
CONVERT_BENCHFLAGS ?=
bench-convert: build
	env OCIEROFS_CONVERT_BENCH=1 OCIEROFS_BENCH_BIN=$(BIN) OCIEROFS_BENCH_MKFS="$(MKFS_EROFS)" \
		OCIEROFS_BENCH_DATA=$(BENCHDATA) OCIEROFS_BENCH_OUT=$(BENCHDATA)/results-convert.md $(CONVERT_BENCHFLAGS) \
		$(GO) test -count=1 -timeout 90m -run '^TestConvertFigures$$' -v ./convert/

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
#
# A run that fails without writing an input is run once more: Go 1.26's
# fuzz coordinator can report "context deadline exceeded" when FUZZTIME
# ends while a worker is busy (go.dev/issue/75804, fixed in Go 1.27), and
# that is no finding. A second failure, or any written input, fails.
fuzz:
	@failed=; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		for try in 1 2; do \
			echo "== $$name ($$pkg), $(FUZZTIME)"; \
			before=$$(git status --porcelain --untracked-files=all -- "$$pkg/testdata/fuzz/$$name" 2>/dev/null | wc -l); \
			if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 3s $(FUZZFLAGS) $$pkg; then break; fi; \
			after=$$(git status --porcelain --untracked-files=all -- "$$pkg/testdata/fuzz/$$name" 2>/dev/null | wc -l); \
			if [ $$try = 2 ] || [ $$after != $$before ]; then failed="$$failed $$name"; break; fi; \
			echo "== $$name failed without writing an input: once more"; \
		done; \
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

# The same against a registry: one of its own (docker-registry) on
# DEMO_REGISTRY, the demo image copied in with skopeo, converted there and
# checked (testdata/demo-registry.sh).
DEMO_REGISTRY ?= 127.0.0.1:5055
demo-registry: build
	BIN=$(BIN) DEMO_REGISTRY=$(DEMO_REGISTRY) bash testdata/demo-registry.sh

# gofmt, go vet and staticcheck (installed into GOPATH/bin at the pinned
# version when it is not there; STATICCHECK=PATH uses another binary), then
# builds for macOS and Windows, so that Linux-only system calls stay in
# _linux.go (or _unix.go) files with a fallback or a "needs Linux" error
# beside them.
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if ! command -v "$(STATICCHECK)" >/dev/null; then \
		echo "installing staticcheck $(STATICCHECK_VERSION) as $(STATICCHECK)"; \
		GOBIN="$$(dirname "$(STATICCHECK)")" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi
	$(STATICCHECK) $(PKGS)
	GOOS=darwin GOARCH=arm64 $(GO) build $(PKGS)
	GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./cmd/ocierofs

clean:
	rm -rf bin testdata/gen

# Release binaries (docs/install.md): both programs, static, for each of
# RELEASE_PLATFORMS, into DIST as PROGRAM-OS-ARCH, with SHA256SUMS. The
# same commit and Go toolchain give the same bytes anywhere: no paths of
# the build machine (-trimpath), no VCS stamp (-buildvcs=false: the
# version comes from VERSION alone), an empty build ID, no cgo. On darwin
# what needs Linux (mounts, directory builds) says so.
#   make release VERSION=v1.2.3
DIST              ?= dist
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_PROGRAMS  := ocierofs ocierofs-mirror
RELEASE_BUILDFLAGS := -trimpath -buildvcs=false -tags urfave_cli_no_docs
RELEASE_LDFLAGS    = -buildid= -X github.com/ocierofs/ocierofs/cmd/internal/version.Version=$(VERSION)
# Every timestamp of the image: the commit's time (0 outside a checkout).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null)
.PHONY: release image image-push
release:
	@if [ -z "$(VERSION)" ]; then echo "make release: give VERSION=vX.Y.Z (no git checkout to describe)" >&2; exit 1; fi
	@mkdir -p $(DIST)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%%/*}; arch=$${p#*/}; \
		for prog in $(RELEASE_PROGRAMS); do \
			echo "$(DIST)/$$prog-$$os-$$arch"; \
			env -u GOFLAGS CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(RELEASE_BUILDFLAGS) \
				-ldflags '$(RELEASE_LDFLAGS)' -o $(DIST)/$$prog-$$os-$$arch ./cmd/$$prog; \
		done; \
	done
	cd $(DIST) && LC_ALL=C sha256sum $(foreach p,$(RELEASE_PLATFORMS),$(foreach b,$(RELEASE_PROGRAMS),$(b)-$(subst /,-,$(p)))) > SHA256SUMS
	@cat $(DIST)/SHA256SUMS

# The image of ocierofs (docs/install.md), built without docker by
# internal/cmd/ocierofs-image from the release binaries of the linux
# platforms: an OCI layout in $(DIST)/image, tagged $(VERSION), an index
# with one image per platform; then its EROFS twin, $(VERSION)-erofs,
# converted by this machine's release ocierofs. CA_CERTS is the bundle of
# the build machine's ca-certificates.
IMAGE_PLATFORMS ?= $(filter linux/%,$(RELEASE_PLATFORMS))
CA_CERTS        ?= /etc/ssl/certs/ca-certificates.crt
HOST_OCIEROFS    = $(DIST)/ocierofs-$(shell $(GO) env GOHOSTOS)-$(shell $(GO) env GOHOSTARCH)
comma := ,
space := $(subst ,, )
IMAGE_BUILD      = $(GO) run -trimpath ./internal/cmd/ocierofs-image -dist $(DIST) \
	-platforms $(subst $(space),$(comma),$(strip $(IMAGE_PLATFORMS))) -version $(VERSION) -revision '$(REVISION)' \
	-epoch $(SOURCE_DATE_EPOCH) -ca-certs $(CA_CERTS)
image: release
	rm -rf $(DIST)/image
	$(IMAGE_BUILD) -o oci:$(DIST)/image:$(VERSION)
	$(HOST_OCIEROFS) convert -q oci:$(DIST)/image:$(VERSION) oci:$(DIST)/image:$(VERSION)-erofs
	@echo "$(DIST)/image: $(VERSION) and $(VERSION)-erofs"

# The same image pushed to IMAGE_REPO (registry/repository), then its
# EROFS twin beside it (tag $(VERSION)-erofs), converted there by ocierofs.
# IMAGE_PUSH_FLAGS go to both (--plain-http for a registry without TLS).
IMAGE_REPO       ?=
IMAGE_PUSH_FLAGS ?=
image-push: release
	@if [ -z "$(IMAGE_REPO)" ]; then echo "make image-push: give IMAGE_REPO=registry.example.com/ocierofs" >&2; exit 1; fi
	$(IMAGE_BUILD) $(IMAGE_PUSH_FLAGS) -o $(IMAGE_REPO):$(VERSION)
	$(HOST_OCIEROFS) convert $(IMAGE_PUSH_FLAGS) $(IMAGE_REPO):$(VERSION)
