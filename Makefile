# warmd's Makefile mirrors CI: `make test` is what .ci/run and a new user run.
SHELL := /bin/bash
GO    ?= go
export GOFLAGS := -buildvcs=false
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X warmd.io/warmd/pkg/version.Version=$(VERSION)

.PHONY: all build test test-unit testbin testenv demo bench bench-weights bench-images bench-cache bench-extender lint soak e2e clean

all: build

## build: the warmd binary into bin/ (cgo on: go-nvml needs it)
build:
	CGO_ENABLED=1 $(GO) build -ldflags "$(LDFLAGS)" -o bin/warmd ./cmd/warmd

## testbin: build/install the real services the tests run (cached per machine by their pins)
testbin:
	scripts/testbin.sh

## testenv: start the services and leave them running; source the printed env file to run go test by hand
testenv:
	@bin=$$(scripts/testbin.sh | tail -1) && scripts/testenv/up.sh "$$bin" "$(CURDIR)/testenv.env" && \
	  echo "source $(CURDIR)/testenv.env   # stop with: scripts/testenv/down.sh $(CURDIR)/testenv.env"

## test: build the services, start them, run every test with the race detector, stop them
test:
	scripts/test.sh

## test-unit: only the tests that need no service (they skip the rest outside CI)
test-unit:
	$(GO) test ./...

## demo: run warmd's main job on its embedded defaults against local services
demo: build
	scripts/demo.sh

## bench: every benchmark, each printing its one-line summary
bench: bench-weights bench-images bench-cache bench-extender

bench-weights bench-images bench-cache bench-extender: build
	@script=scripts/bench/$(@:bench-%=%).sh; \
	if [ -x $$script ]; then scripts/with-testenv.sh $$script; else echo "$@: no benchmark yet"; fi

## e2e: only the two-node end-to-end test (make test runs it too)
e2e:
	scripts/with-testenv.sh go test -count=1 -v -run TestTwoNodesWarmUp ./test/e2e/

## soak: long fault loops (e.g. 200 kill -9 resumes)
soak: build
	scripts/with-testenv.sh scripts/soak.sh

## lint: formatting and vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin
