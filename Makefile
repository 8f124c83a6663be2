# warmd's Makefile mirrors CI: `make test` is what .ci/run and a new user run.
SHELL := /bin/bash
GO    ?= go
export GOFLAGS := -buildvcs=false
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X warmd.io/warmd/pkg/version.Version=$(VERSION)
# go-nvml's nvml.h marks functions deprecated that its bindings still wrap, so every cold build of it
# printed hundreds of -Wdeprecated-declarations lines. Go has no per-package cgo flags from outside
# a package (its #cgo lines live in go-nvml's source), so this is set for the build's cgo packages:
# runtime/cgo, net, os/user and go-nvml's two. It silences only that warning class; set CGO_CFLAGS
# yourself to override.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build image chart test test-unit testbin testenv cluster-up cluster-e2e demo bench bench-weights bench-images bench-cache bench-extender bench-prewarm bench-node bench-idle bench-fleet lint soak e2e clean

all: build

## build: the warmd binary into bin/ (cgo on: go-nvml needs it)
build:
	CGO_ENABLED=1 $(GO) build -ldflags "$(LDFLAGS)" -o bin/warmd ./cmd/warmd

## image: multi-arch OCI image (linux/amd64, linux/arm64) without a container engine, as an OCI layout in
## _output/image; IMAGE=registry/repo:tag also pushes it. Ends with "image: ... digest sha256:...".
image:
	VERSION=$(VERSION) scripts/image.sh

## chart: package charts/warmd into _output/charts with appVersion = the tag `make image` builds (VERSION)
chart:
	@helm=$$(scripts/tools.sh helm | tail -1)/helm && mkdir -p _output/charts && \
	  $$helm lint --strict charts/warmd && $$helm package charts/warmd --app-version $(VERSION) -d _output/charts

## testbin: build/install the real services the tests run (cached per machine by their pins)
testbin:
	scripts/testbin.sh

## testenv: start the services and leave them running; source the printed env file to run go test by hand
testenv:
	@bin=$$(scripts/testbin.sh | tail -1) && scripts/testenv/up.sh "$$bin" "$(CURDIR)/testenv.env" && \
	  scripts/tools.sh env >>"$(CURDIR)/testenv.env" && \
	  echo "source $(CURDIR)/testenv.env   # stop with: scripts/testenv/down.sh $(CURDIR)/testenv.env"

## cluster-up: start the one-node cluster (kubelet, scheduler, controller-manager, API server) and leave it running
cluster-up:
	@bin=$$(scripts/testbin.sh debian containerd versitygw kube cluster | tail -1) && scripts/cluster/up.sh "$$bin" "$(CURDIR)/cluster.env" && \
	  echo "source $(CURDIR)/cluster.env; export KUBECONFIG=\$$WARMD_CLUSTER_KUBECONFIG   # stop with: scripts/cluster/down.sh $(CURDIR)/cluster.env"

## cluster-e2e: only the cluster e2e (warmd as a pod on a real one-node cluster; make test runs it too)
cluster-e2e:
	scripts/cluster/e2e.sh

## test: build the services, start them, run every test with the race detector, stop them
test:
	scripts/test.sh

## test-unit: only the tests that need no service (they skip the rest outside CI)
test-unit:
	$(GO) test ./...

## demo: run warmd's main job on its embedded defaults against local services
demo: build
	scripts/demo.sh

## bench: every benchmark, each printing its one-line summary (each script's header says what it compares and why it is fair)
bench: bench-weights bench-images bench-cache bench-extender bench-prewarm bench-node bench-idle bench-fleet

## bench-node: a fresh node's image + weights + compile cache together against each leg alone;
## bench-idle: a warm node's CPU, peak RSS and API writes over IDLE seconds (default 600);
## bench-fleet: one model to 8 nodes, each in its own network namespace on a tc-capped link, with and without peers
bench-weights bench-images bench-cache bench-extender bench-node bench-idle bench-fleet: build
	@script=scripts/bench/$(@:bench-%=%).sh; \
	if [ -x $$script ]; then scripts/with-testenv.sh $$script; else echo "$@: no benchmark yet"; fi

# bench-prewarm needs no service: a model in a temp data dir, read cold and after warmd's pre-warm
bench-prewarm:
	scripts/bench/prewarm.sh

## e2e: only the two-node end-to-end test (make test runs it too)
e2e:
	scripts/with-testenv.sh go test -count=1 -v -run TestTwoNodesWarmUp ./test/e2e/

## soak: long fault loops (e.g. 200 kill -9 resumes)
soak: build
	scripts/with-testenv.sh scripts/soak.sh

## lint: formatting, vet, and the layering (hack/layering: the extender links no daemon part, nothing
## shipped links a test helper, cmd/ is wiring, no folder-level import cycle; docs/architecture.md's
## import graph is the code's). make test runs the same check (hack/layering's test).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./hack/layering

clean:
	rm -rf bin _output
