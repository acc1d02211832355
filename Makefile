# Scavenger's two commands: `make demo` and `make test`. Both first install
# what is missing (as root, with apt), then build.

GO        ?= go
PYTHON    ?= /usr/bin/python3
BIN       := $(CURDIR)/bin
# The measured GPU traces the simulator and the trace replay read.
TRACES    ?= $(CURDIR)/../shared/traces
DEMO_DIR  ?= $(CURDIR)/.cache/demo
APT_PKGS  := python3-torch libopenblas0-pthread openssh-server slurm-wlm munge systemd-container debootstrap chromium
GOFLAGS_TEST ?= -timeout 60m
# The version every binary reports (scavctl --version, scavd's log and API):
# the commit, and -dirty with uncommitted changes.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/scavenger-ml/scavenger/api.Version=$(VERSION)
# go-nvml's header marks APIs deprecated; the warnings say nothing about this code.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all setup build demo slurm-dev slurm-dev-stop walkthrough test test-go test-race test-python vet fuzz bench-telemetry bench-ingest bench-scale bench-sim bench-loop bench-loop-trace bench-ops bench-security bench-cloud bench-faults bench-restart bench-dashboard dashboard-example report-example clean

all: build

## setup: install the Debian packages the demo and tests need (as root), if missing, and make /run/sshd
setup:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make setup: missing Debian packages:$$missing; run as root or: sudo apt-get install$$missing" >&2; exit 1; fi; \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(PYTHON) -c 'import torch' || { echo "make setup: $(PYTHON) cannot import torch" >&2; exit 1; }
	@# sshd's privilege separation directory: ssh.service makes it, a host without systemd may not have it
	@if [ ! -d /run/sshd ] && [ "$$(id -u)" = 0 ]; then mkdir -p -m 0755 /run/sshd; fi

## build: build scavd and scavctl into bin/
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/scavd ./cmd/scavctl

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
test: setup build vet test-go test-race test-python

vet:
	$(GO) vet ./...

# test-go keeps the whole output in .cache/test-go.log and ends, when a test
# failed, with each failure's own lines: the end of a long log is what CI shows.
test-go:
	@mkdir -p .cache
	@{ SCAV_TEST_BIN=$(BIN) SCAV_TEST_PYTHON=$(PYTHON) $(GO) test $(GOFLAGS_TEST) ./... 2>&1; echo $$? > .cache/test-go.rc; } | tee .cache/test-go.log
	@rc=$$(cat .cache/test-go.rc); if [ "$$rc" != 0 ]; then \
	  echo; echo "== the failures (whole output: .cache/test-go.log) =="; \
	  awk '/^--- FAIL/{p=1; n=0} /^(=== RUN|--- PASS|--- SKIP|ok |FAIL\t|PASS$$)/{p=0} p && n++ < 40' .cache/test-go.log; \
	  grep -E '^(FAIL|panic:)' .cache/test-go.log; fi; exit $$rc

## test-race: the concurrent core (one writer per job record, ingest, the supervise loop) under the race detector
test-race:
	$(GO) test -race -count=1 ./daemon/jobs/ ./daemon/ingest/ ./stepstats/ ./launchers/supervisor/

test-python:
	cd python && timeout 900 $(PYTHON) -m unittest discover -s tests -v

## fuzz: run each fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./telemetry -run '^$$' -fuzz FuzzDecodeStep -fuzztime $(FUZZTIME)
	$(GO) test ./telemetry -run '^$$' -fuzz FuzzDecodeFlat -fuzztime $(FUZZTIME)
	$(GO) test ./stepstats -run '^$$' -fuzz FuzzStepstats -fuzztime $(FUZZTIME)
	$(GO) test ./daemon/ingest -run '^$$' -fuzz FuzzIngestReader -fuzztime $(FUZZTIME)
	$(GO) test ./daemon/jobindex -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	for f in FuzzReadPlacements FuzzReadScalability FuzzReadValidation; do \
	  $(GO) test ./optimizer/trace -run '^$$' -fuzz $$f -fuzztime $(FUZZTIME) || exit 1; done

## walkthrough: walk through README.md as a new user, on a fresh checkout: every command, its time, its outcome; writes docs/walkthrough.md
walkthrough: build
	OMP_NUM_THREADS=1 $(GO) run ./tools/walkthrough --python $(PYTHON)

## slurm-dev: a one-node Slurm on this host (root): munge, slurmctld and slurmd in /etc/slurm/slurm.conf (deploy/slurm/dev-cluster.sh); README's batch script then runs with sbatch
slurm-dev: setup build
	sh deploy/slurm/dev-cluster.sh start

## slurm-dev-stop: shut that Slurm down and remove what slurm-dev wrote
slurm-dev-stop:
	sh deploy/slurm/dev-cluster.sh stop

## bench-telemetry: median step time of the instrumented vs the uninstrumented CNN, and what each part of the tracker costs
bench-telemetry: setup build
	@mkdir -p docs
	{ echo "# Telemetry overhead (issue 2)"; echo; echo "Generated by \`make bench-telemetry\` on $$(nproc) cores, $$(date -u +%F)."; echo; \
	  echo "## The examples under scavctl run (separate runs, alternating)"; echo; \
	  $(GO) run ./tools/benchtelemetry --scavctl $(BIN)/scavctl --python $(PYTHON); echo; \
	  echo "## Within one job (two copies of the CNN taking turns; the dependable figure on a busy machine)"; echo; echo '```'; \
	  $(PYTHON) python/bench/tracker_overhead.py; echo '```'; echo; \
	  echo "## Where the instrumented step's time goes (copies of the CNN taking turns; CPU time of the training thread)"; echo; echo '```'; \
	  $(PYTHON) python/bench/tracker_cost.py; echo '```'; echo; \
	  echo "## Cost of one step() call"; echo; echo '```'; $(PYTHON) python/bench/step_cost.py; echo '```'; } | tee docs/bench-telemetry.md

## bench-ingest: one scavd's telemetry ingest with confirmations: records/s from block writers, CPU per 1,000 records from 64 per-step writers, and its memory
bench-ingest: build
	@mkdir -p docs
	{ echo "# Telemetry ingest (issues 2 and 25)"; echo; echo "Generated by \`make bench-ingest\` (tools/benchingest) on $$(nproc) cores, $$(date -u +%F), with whatever else ran on the machine then: the CPU figures are scavd's own (/proc/PID/stat), its idle share measured alongside."; echo; \
	  $(GO) run ./tools/benchingest --scavd $(BIN)/scavd; } | tee docs/bench-ingest.md

## bench-scale: job history (10 to 10,000 jobs), step history (200 to 200,000 records), scavctl jobs while 16 jobs run,
## and scavd's memory against BENCH_SCALE_BASE's (the build of docs/bench-ingest.md's idle figure); BENCH_SCALE_FLAGS:
## more tools/benchscale flags (e.g. --jobs 10,1000 --records 200,20000 for a quick look)
BENCH_SCALE_BASE ?= 9e601d6
BENCH_SCALE_FLAGS ?=
bench-scale: build
	@mkdir -p docs .cache
	@base=$(CURDIR)/.cache/bench-scale-base; if [ "$$(cat $$base/rev 2>/dev/null)" != "$(BENCH_SCALE_BASE)" ] || [ ! -x $$base/bin/scavd ]; then \
	  echo "building scavd of $(BENCH_SCALE_BASE) into $$base"; rm -rf $$base; mkdir -p $$base/src && \
	  git archive $(BENCH_SCALE_BASE) | tar -x -C $$base/src && (cd $$base/src && $(GO) build -o $$base/bin/ ./cmd/scavd) && \
	  echo $(BENCH_SCALE_BASE) > $$base/rev && rm -rf $$base/src; fi
	{ echo "# Scale: job history, step history, running jobs and memory (issue 25)"; echo; \
	  echo "Generated by \`make bench-scale\` on $$(nproc) cores, $$(date -u +%F), build $(VERSION)."; echo; \
	  $(GO) run ./tools/benchscale --scavd $(BIN)/scavd --scavctl $(BIN)/scavctl --python $(PYTHON) \
	    --base-scavd $(CURDIR)/.cache/bench-scale-base/bin/scavd --base-name $(BENCH_SCALE_BASE) $(BENCH_SCALE_FLAGS); } | tee docs/bench-scale.md

## bench-loop: the closed loop against every fixed candidate, relaunch overhead, online prediction
## (BENCH_LOOP_TARGET steps' work at the smallest batch: 15000 makes the best fixed job run >= 2 minutes)
## (BENCH_LOOP_FLAGS: more tools/benchloop flags, e.g. --batches 128,256 to narrow the search space)
BENCH_LOOP_TARGET ?= 15000
BENCH_LOOP_FLAGS ?=
bench-loop: setup build
	@mkdir -p docs
	{ echo "# Closed loop on this machine (issues 4 and 14)"; echo; echo "Generated by \`make bench-loop BENCH_LOOP_TARGET=$(BENCH_LOOP_TARGET) BENCH_LOOP_FLAGS='$(BENCH_LOOP_FLAGS)'\` on $$(nproc) cores, $$(date -u +%F): examples/resumable_cnn.py, CPU, gloo."; echo; \
	  $(GO) run ./tools/benchloop --scavctl $(BIN)/scavctl --python $(PYTHON) --target $(BENCH_LOOP_TARGET) $(BENCH_LOOP_FLAGS); } | tee docs/bench-loop.md

## bench-loop-trace: the live loop (real scavd, policy, relaunches) on time-compressed replays of the shared traces, against the simulator's figure for each cell, and again under stress -c 2; writes docs/bench-loop-trace.md (BENCH_LOOP_TRACE_FLAGS: more tools/benchlooptrace flags, e.g. --cells cifar10/time:dgx-ext)
BENCH_LOOP_TRACE_FLAGS ?= --stress 2
bench-loop-trace: build
	{ echo "# Live loop on replayed traces (issue 19)"; echo; echo "Generated by \`make bench-loop-trace BENCH_LOOP_TRACE_FLAGS='$(BENCH_LOOP_TRACE_FLAGS)'\` on $$(nproc) cores, $$(date -u +%F): python/bench/trace_replay.py under scavd's local launcher (one worker process per GPU of one node of the type), \`tools/benchlooptrace\`'s own documentation says how each figure is counted."; echo; \
	  $(GO) run ./tools/benchlooptrace --scavctl $(BIN)/scavctl --python $(PYTHON) --traces $(TRACES) $(BENCH_LOOP_TRACE_FLAGS); } | tee docs/bench-loop-trace.md

## bench-sim: score the policies on the shared GPU traces; writes docs/bench-sim.md
bench-sim:
	SCAV_BENCH_SIM=$(CURDIR)/docs/bench-sim.md $(GO) test ./optimizer/sim -run TestBenchTable -count=1 -v | grep -v '^=== RUN'
	@cat docs/bench-sim.md

## bench-cloud: cloudvm (root): instance start/stop, provision to first step, spot notice to running again, the providers side by side (local; aws and gce through their emulations), the live loop against the best fixed (type, K, B) on a job of ≥ 3 min (interleaved, median of 3); writes docs/bench-cloud.md (about 1.5 h; BENCH_CLOUD_FLAGS=--skip-loop for the rest)
BENCH_CLOUD_FLAGS ?=
bench-cloud: setup build
	@mkdir -p docs
	{ echo "# Cloud machines on this machine (issues 12 and 22)"; echo; echo "Generated by \`make bench-cloud\` on $$(nproc) cores, $$(date -u +%F): the cloudvm launcher over the local cloud (namespace instances with cgroup CPU quotas), examples/resumable_cnn.py, CPU, gloo."; echo; \
	  $(GO) run ./tools/benchcloud --scavd $(BIN)/scavd --scavctl $(BIN)/scavctl --python $(PYTHON) $(BENCH_CLOUD_FLAGS); } | tee docs/bench-cloud.md

## bench-ops: prolog hook latency, lost-host detection, requeue release; writes docs/bench-ops.md (root)
bench-ops: setup
	GO=$(GO) sh tools/bench-ops.sh

## bench-faults: the fault suite (issue 13), each trial N times (default 10); writes docs/bench-faults.md (root: tmpfs)
N ?= 10
bench-faults: build
	SCAV_BENCH_FAULTS=$(CURDIR)/docs/bench-faults.md SCAV_BENCH_N=$(N) SCAV_TEST_BIN=$(BIN) SCAV_TEST_PYTHON=$(PYTHON) \
	  $(GO) test ./daemon -run '^TestFaults$$' -count=1 -timeout 240m -v 2>&1 | grep -E '^\s+faults_test.go:[0-9]+: .* #[0-9]+:|^(--- |ok|FAIL)' || true
	@cat docs/bench-faults.md

## bench-restart: kill -9 of a worker to its next step, scavctl --max-restarts against torchrun --max_restarts (issue 13), RUNS times each (default 5); writes docs/bench-restart.md
RUNS ?= 5
bench-restart: setup build
	@mkdir -p docs
	{ echo "# A crashed worker restarted: scavctl against torchrun (issue 13)"; echo; \
	  echo "Generated by \`make bench-restart\` (tools/bench-restart.sh) on $$(nproc) cores, $$(date -u +%F): 2 ranks of tools/restartbench/worker.py (DDP, gloo, CPU, a checkpoint every 25 steps, resumed from the newest by the script itself under either launcher); rank 1 is killed with SIGKILL at its step $${KILL_AT:-60}; the time is from the kill to the first step completed by a restarted worker."; echo; \
	  N=$(RUNS) PYTHON=$(PYTHON) BIN=$(BIN) bash tools/bench-restart.sh; } | tee docs/bench-restart.md

## bench-security: issue 20's attacks and their tests, two users side by side while one floods, and scavctl jobs latency and ingest records/s against BASE (default cb44878, before issue 20); writes docs/bench-security.md (root)
bench-security:
	GO=$(GO) PYTHON=$(PYTHON) NOTE="$(NOTE)" sh tools/bench-security.sh

## bench-dashboard: the dashboard's page load, live-update lag and scavd's memory with 4 tabs, on a job of 10,000 step records (tools/benchdash); writes docs/bench-dashboard.md
bench-dashboard: setup build
	@mkdir -p docs
	{ echo "# The web dashboard (issue 24)"; echo; echo "Generated by \`make bench-dashboard\` on $$(nproc) cores, $$(date -u +%F): scavd and headless Chromium on this machine."; echo; \
	  $(GO) run ./tools/benchdash --scavd $(BIN)/scavd --scavctl $(BIN)/scavctl; } | tee docs/bench-dashboard.md

## dashboard-example: screenshots of the web dashboard at 1280x800 from a real job that moved (tools/dashexample); writes docs/dashboard-*.png
dashboard-example: setup build
	@mkdir -p docs
	$(GO) run ./tools/dashexample --scavd $(BIN)/scavd --scavctl $(BIN)/scavctl --python $(PYTHON) --out docs

## report-example: run a short optimised job; writes docs/top-example.txt and docs/report-example.{png,html}
report-example: setup build
	BIN=$(BIN) PYTHON=$(PYTHON) sh tools/report-example.sh

clean:
	rm -rf $(BIN) .cache
