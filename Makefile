# progressdb — build, run, test, benchmark.
GO        ?= go
BIN       := bin/progressdb
PKG       := ./server/cmd/progressdb
# `progressdb version` prints these; without git (a source tarball) they
# fall back to "dev" and "unknown". Only v* tags count as versions.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/progressdb/progressdb/server/internal/buildinfo.version=$(VERSION) \
             -X github.com/progressdb/progressdb/server/internal/buildinfo.commit=$(COMMIT)
# Short fault trials run in `make test`; `make faults` runs the long mode.
FAULT_TRIALS ?= 30

.PHONY: all build run demo cluster-demo test testbins test-short faults fuzz bench bench-compare lint vet fmt clean clients check-clients

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) $(PKG)

# Starts the server on an embedded database in ./data (Ctrl-C to stop).
# exec: the server replaces the recipe's shell, so the SIGTERM make passes
# to its child when killed (`make run &`, then `kill %1` or `kill $$!`)
# stops the server instead of orphaning it with the port and the lock.
run: build
	PROGRESSDB_DB_PATH=$${PROGRESSDB_DB_PATH:-./data} exec ./$(BIN) serve

# Seeds a temporary database, runs a dry run and a real run, prints the
# summaries and audit files, and verifies them.
demo: build
	./scripts/demo.sh ./$(BIN)

# Starts an etcd (progressdb-dev-etcd, a development tool kept out of the
# progressdb binary) and three nodes on loopback, writes through one node
# and reads back through the others (docs/cluster.md); CLUSTER_DEMO_TLS=1
# runs them with mutual TLS (docs/tls.md), CLUSTER_DEMO_SEALED=1 sealed
# (docs/encryption.md), CLUSTER_DEMO_REPLICAS=3 with three replicas of
# each shard (docs/cluster.md).
cluster-demo: build
	$(GO) build -o bin/progressdb-dev-etcd ./server/cmd/progressdb-dev-etcd
	./scripts/cluster-demo.sh ./$(BIN) ./bin/progressdb-dev-etcd

# Tests that need an outside program (promtool, zsh, fish, systemd-analyze,
# docker, kubectl, node, npm) skip when it is missing; go test hides skips of passing
# packages, so each writes a SKIP line naming the program to a log printed here.
# testreport prints what go test would and ends with the 10 slowest tests,
# so that a test that grows is seen when it does.
SKIPLOG := $(CURDIR)/bin/test-skips.txt
# go test starts packages in the order it is given them, two at a time on
# two cores: the slowest go first, so that none of them is left running
# alone at the end (the 10 slowest tests name them when this list ages).
TESTFIRST := ./server/tests/faults ./server/internal/app ./server/internal/cli ./server/internal/api ./server/internal/cluster \
             ./server/internal/replica ./server/tests/deploy ./server/internal/retention ./server/pkg/store
test: testbins
	$(GO) vet ./...
	@mkdir -p bin && rm -f $(SKIPLOG)
	@$(GO) build -o bin/testreport ./server/internal/testtools/testreport
	@PROGRESSDB_TEST_BIN_DIR=$(TESTBIN) PROGRESSDB_TEST_SKIPS=$(SKIPLOG) bin/testreport -go $(GO) -slowest 10 -- -race -count=1 -timeout 12m $(TESTFIRST) ./...; status=$$?; \
	  if [ -s $(SKIPLOG) ]; then sort -u $(SKIPLOG); fi; exit $$status

# The commands tests run as processes, linked once for the whole run
# instead of once per package (internal/testbin), stamped with
# testbin.LDFlags' version and commit (a test of the CLI checks them).
TESTBIN := $(CURDIR)/bin/test
TESTLDFLAGS := -X github.com/progressdb/progressdb/server/internal/buildinfo.version=v0.0.0-test \
               -X github.com/progressdb/progressdb/server/internal/buildinfo.commit=7e57b1d5c0de
testbins:
	$(GO) build -ldflags '$(TESTLDFLAGS)' -o $(TESTBIN)/ ./server/cmd/progressdb ./server/cmd/progressdb-dev-etcd

test-short:
	$(GO) test -count=1 -short ./...

faults: testbins
	PROGRESSDB_TEST_BIN_DIR=$(TESTBIN) PROGRESSDB_FAULT_TRIALS=$(FAULT_TRIALS) $(GO) test -count=1 -timeout 60m -run 'Fault' -v ./server/tests/faults/

# FUZZTIME per target (default 30s); the seed corpora also run in `make test`.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./server/pkg/config -run '^$$' -fuzz FuzzParseDuration -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzValidateID -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzKeys -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzDecodeRecords -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzRecordEncoding -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzFastHead -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzFastThread -fuzztime $(FUZZTIME)
	$(GO) test ./server/pkg/store -run '^$$' -fuzz FuzzFastMessage -fuzztime $(FUZZTIME)
	$(GO) test ./server/internal/wire -run '^$$' -fuzz FuzzAppendMessage -fuzztime $(FUZZTIME)
	$(GO) test ./server/internal/api -run '^$$' -fuzz FuzzAppendRequest -fuzztime $(FUZZTIME)
	$(GO) test ./audit -run '^$$' -fuzz FuzzReader -fuzztime $(FUZZTIME) -fuzzminimizetime 0
	$(GO) test ./audit -run '^$$' -fuzz FuzzVerify -fuzztime $(FUZZTIME)
	$(GO) test ./audit -run '^$$' -fuzz FuzzSeal -fuzztime $(FUZZTIME)
	$(GO) test ./audit -run '^$$' -fuzz FuzzValidJSON -fuzztime $(FUZZTIME)

bench: build
	$(GO) run ./server/cmd/progressdb-bench -out BENCHMARKS.md $(BENCHFLAGS)

# Builds progressdb-bench at BASE and from the working tree, runs BENCH
# (B9,B14) of both alternated, and compares them with benchstat
# (BENCHMARKS.md, "Comparing two revisions"). ROUNDS, REPS, SCALE tune it.
bench-compare:
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<rev> [BENCH=B9,B14] [ROUNDS=3] [REPS=2] [SCALE=1]"; exit 2; }
	GO=$(GO) BENCH=$(BENCH) ROUNDS=$(ROUNDS) REPS=$(REPS) SCALE=$(SCALE) ./scripts/bench-compare.sh $(BASE)

vet:
	$(GO) vet ./...

# The clients of spec §13, generated from api/openapi.yaml by pinned
# generators: oapi-codegen here, openapi-typescript in
# clients/typescript/package.json (its package-lock.json pins the rest).
OAPI_CODEGEN := github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2
NPM          ?= npm
clients: clients/typescript/node_modules/.package-lock.json
	$(GO) run $(OAPI_CODEGEN) -config client/oapi-codegen.yaml api/openapi.yaml
	cd clients/typescript && $(NPM) run --silent generate

clients/typescript/node_modules/.package-lock.json: clients/typescript/package-lock.json
	cd clients/typescript && $(NPM) ci --no-audit --no-fund

# CI: the committed clients are what the description generates.
check-clients: clients
	@git diff --exit-code -- client clients || { echo "clients differ from api/openapi.yaml: run make clients and commit"; exit 1; }
	@out=$$(git status --porcelain -- client clients); if [ -n "$$out" ]; then echo "clients: files not committed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin
