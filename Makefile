# Scavenger's two commands: `make demo` and `make test`. Both first install
# what is missing (as root, with apt), then build.

GO        ?= go
PYTHON    ?= /usr/bin/python3
BIN       := $(CURDIR)/bin
DEMO_DIR  ?= $(CURDIR)/.cache/demo
APT_PKGS  := python3-torch libopenblas0-pthread
GOFLAGS_TEST ?= -timeout 20m

.PHONY: all setup build demo test test-go test-python vet fuzz bench-telemetry bench-ingest bench-sim bench-loop clean

all: build

## setup: install the Debian packages the demo and tests need (as root), if missing
setup:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make setup: missing Debian packages:$$missing; run as root or: sudo apt-get install$$missing" >&2; exit 1; fi; \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(PYTHON) -c 'import torch' || { echo "make setup: $(PYTHON) cannot import torch" >&2; exit 1; }

## build: build scavd and scavctl into bin/
build:
	$(GO) build -o $(BIN)/ ./cmd/scavd ./cmd/scavctl

## demo: run the CNN example with 2 workers on the embedded defaults and summarise its telemetry
demo: setup build
	@rm -rf $(DEMO_DIR); mkdir -p $(DEMO_DIR)
	$(BIN)/scavctl --state-dir $(DEMO_DIR) run --name demo --workers 2 --batch-size 64 -- $(PYTHON) examples/cnn.py --steps 60
	@echo; echo "== jobs =="
	@$(BIN)/scavctl --state-dir $(DEMO_DIR) jobs
	@echo; echo "== telemetry summary =="
	@id=$$($(BIN)/scavctl --state-dir $(DEMO_DIR) jobs -o json | $(PYTHON) -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin) if j["name"]=="demo"][-1])'); \
	$(BIN)/scavctl --state-dir $(DEMO_DIR) steps $$id --summary
	@rm -rf $(DEMO_DIR)

## test: install, build, vet, then every Go and python test
test: setup build vet test-go test-python

vet:
	$(GO) vet ./...

test-go:
	SCAV_TEST_BIN=$(BIN) SCAV_TEST_PYTHON=$(PYTHON) $(GO) test $(GOFLAGS_TEST) ./...

test-python:
	cd python && $(PYTHON) -m unittest discover -s tests -v

## fuzz: run each fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./telemetry -run '^$$' -fuzz FuzzDecodeStep -fuzztime $(FUZZTIME)
	$(GO) test ./daemon -run '^$$' -fuzz FuzzIngestReader -fuzztime $(FUZZTIME)
	for f in FuzzReadPlacements FuzzReadScalability FuzzReadValidation; do \
	  $(GO) test ./optimizer/trace -run '^$$' -fuzz $$f -fuzztime $(FUZZTIME) || exit 1; done

## bench-telemetry: median step time of the instrumented vs the uninstrumented CNN
bench-telemetry: setup build
	$(GO) run ./tools/benchtelemetry --scavctl $(BIN)/scavctl --python $(PYTHON)

## bench-ingest: records/s of one scavd from 8 concurrent writers, and its memory
bench-ingest: build
	$(GO) run ./tools/benchingest --scavd $(BIN)/scavd

## bench-loop: the closed loop against every fixed candidate, relaunch overhead, online prediction
bench-loop: setup build
	$(GO) run ./tools/benchloop --scavctl $(BIN)/scavctl --python $(PYTHON)

## bench-sim: score the policies on the shared GPU traces; writes docs/bench-sim.md
bench-sim:
	SCAV_BENCH_SIM=$(CURDIR)/docs/bench-sim.md $(GO) test ./optimizer/sim -run TestBenchTable -count=1 -v | grep -v '^=== RUN'
	@cat docs/bench-sim.md

clean:
	rm -rf $(BIN) .cache
