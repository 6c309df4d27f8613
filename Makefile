# Everything CI runs is a target here; .ci/run runs `make ci-tests` and, beside it, `make ci-lane`.
GO      ?= go
GOFLAGS ?=
export GOFLAGS

.PHONY: test test-deps lint build check-static helm-test bench-quick adapters-test fuzz-smoke demo ci \
	ci-tests satellites ci-lane \
	test-under-load model compat k8s-e2e check-adapters flake-hunt mutants conformance python-test \
	schedule-chaos

## test: install redis-server/sentinel/cli if missing (as root, with apt-get), then run every
## test of the main module with the race detector against real Redis processes. The test
## binaries are compiled first (-exec true runs none), so that the timing tests never run
## beside the compiler: from a cold cache it keeps both cores busy for minutes.
test: test-deps
	$(GO) test -race -count=1 -exec true ./... >/dev/null
	$(GO) test -race -count=1 -p $(TEST_P) -timeout 15m ./...

## TEST_P: test binaries run at once by make test. The long packages (election, e2e, chaos,
## conformance, reliability) mostly wait for lease expiries and take 60 % of a 2-core machine
## four at a time: go test's default (one per core) left it half idle. make test-under-load
## keeps the default: its load is two busy loops beside two binaries, no more.
TEST_P ?= 4

test-deps:
	@hack/install-test-deps.sh

## lint: go vet, and gofmt must have nothing to change.
lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## build: the release binary, with the exact command line of the Dockerfile.
build:
	hack/build.sh bin/elector
	hack/check-static.sh bin/elector

## helm-test: lint and render the chart, decode every object strictly (own Go module).
## CGO off and -trimpath, as hack/k8s-e2e.sh builds helm from this module and the test modules,
## and as adapters-test: with the same flags and module versions, helm's packages, client-go
## and the Kubernetes API types are compiled once for all of them.
helm-test:
	cd test/helm && CGO_ENABLED=0 $(GO) vet -trimpath ./... && CGO_ENABLED=0 $(GO) test -trimpath -count=1 ./...

## chart-package: helm lint --strict, helm package and helm repo index for charts/elector-lib and
## charts/elector into dist/charts (CHART_OUT); with CHART_OCI=oci://host/path, helm push them too.
## helm is built from test/helm's module (HELM= names another). The OCI push and pull are tested
## without a registry of yours by test/helm (TestChartOCIRoundTrip, an in-process registry).
CHART_OUT ?= dist/charts
.PHONY: chart-package
chart-package:
	hack/chart-package.sh $(CHART_OUT)

## bench-quick: the peer comparison in its quick mode, so that it cannot rot.
bench-quick:
	cd bench && $(GO) test -count=1 -run Quick ./...
	cd bench && $(GO) test -count=1 ./internal/redisproc ./scale # the MONITOR parser, the double-hold checker

## adapters-test: each adapter module against real Redis and its framework (own modules).
## client-go's packages are compiled without -race here: instrumenting them takes minutes.
## With -trimpath and CGO off, as hack/check-adapters.sh builds them from its own module cache
## (a package's directory is then not part of its build cache key, so check-adapters reuses
## these compiled client-go packages instead of compiling them again, about 200 s), and as
## helm-test and hack/k8s-e2e.sh build theirs: one compile of client-go serves them all.
## examples/controller-runtime (own module, the adapter's client-go and controller-runtime
## versions) with the same flags: it reuses the adapter's compiled controller-runtime.
adapters-test: test-deps
	cd adapters/clientgo && CGO_ENABLED=0 $(GO) vet -trimpath ./... && CGO_ENABLED=0 $(GO) test -trimpath -count=1 -timeout 15m ./...
	cd examples/controller-runtime && CGO_ENABLED=0 $(GO) vet -trimpath ./... && CGO_ENABLED=0 $(GO) test -trimpath -count=1 ./...
	cd adapters/gocron && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## check-adapters: build each adapter with GOWORK=off against the core from a file:// proxy
## of the tree, as a user's `go get` does, and examples/controller-runtime against them.
check-adapters:
	hack/check-adapters.sh

## fuzz-smoke: every fuzz target for a bounded number of executions; a crasher lands in
## testdata/fuzz. A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
## report a spurious "context deadline exceeded" when the deadline races a busy worker
## (golang/go#75804, fixed in Go 1.27), which failed CI with no crasher written. hack/fuzz.sh
## runs each target and tells a starved worker (golang/go#52569) from a crasher by replaying
## the input it wrote.
FUZZTIME ?= 30000x
fuzz-smoke:
	GO=$(GO) hack/fuzz.sh ./pkg/lease FuzzParseRecord $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/leasekit FuzzParseEvent $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/leasekit FuzzEventRoundTrip $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/leasekit FuzzNewLease $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./pkg/election FuzzValidateTiming $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/redisclient FuzzValidate $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./internal/redisclient FuzzPasswordNeverPrinted $(FUZZTIME)
	GO=$(GO) hack/fuzz.sh ./cmd/elector/internal/envflag FuzzApply $(FUZZTIME)

## conformance: the Python client's pytest suite (clients/python) and the conformance suite
## (test/conformance: the Go library and the Python client in mixed elections with Go replicas;
## its deliberately broken clients must fail). make test runs test/conformance too (./...), so
## ci-tests adds only python-test. PYTHON: an interpreter with redis-py and pytest.
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import redis, pytest' 2>/dev/null && { echo $$p; break; }; done)
python-test: test-deps
	cd clients/python && $(or $(PYTHON),python3) -m pytest -q -p no:cacheprovider
conformance: python-test
	ELECTOR_PYTHON=$(PYTHON) $(GO) test -count=1 -timeout 10m -v ./test/conformance

## test-under-load: the timing-sensitive packages (election and Group, lease, the e2e tests)
## under the race detector while two busy loops load both cores (hack/under-load.sh; in CI,
## while its builds lane still runs, the lane is the load instead: UNDER_LOAD_LANE).
## The simulator's tests (SIM_TESTS) run on simulated time against a simulated Redis: load and
## the server change nothing in them, so make test-under-load and make compat leave them out.
LOAD_PKGS ?= ./pkg/election/... ./pkg/lease/... ./internal/leasekit/... ./test/e2e/...
SIM_TESTS := ^TestSim
export SIM_TESTS
test-under-load: test-deps
	hack/under-load.sh $(GO) test -race -count=1 -timeout 20m -skip '$(SIM_TESTS)' $(LOAD_PKGS)

## flake-hunt: the timing-sensitive packages (election, lease, child, e2e, reliability, the
## adapters) FLAKE_N times (default 10) beside two busy loops and a compile loop at nice 19,
## against every Redis server found (hack/flake-hunt.sh); prints each test's failure count.
flake-hunt: test-deps
	hack/flake-hunt.sh

## model: the Promela models of the protocol checked by spin, and every mutant refuted.
model: test-deps
	hack/model.sh

## compat: the real-server suites against Redis 7.0 (Debian), Redis 7.2 and Valkey 8
## (built from ../shared/servers, cached outside the repo).
compat: test-deps
	hack/compat.sh

## k8s-e2e: a real one-node Kubernetes built from source (cached outside the repo), the chart
## installed with helm, failed over and rolled (own Go module, test/k8s).
k8s-e2e:
	hack/k8s-e2e.sh

## schedule-chaos: 300 slots of elector run --schedule on 3 replicas and Redis with AOF through
## kills, rollouts, Redis restarts and clock steps (test/chaos, TestScheduleChaos), ~11 min.
schedule-chaos: test-deps
	hack/schedule-chaos.sh

## sim: the deterministic simulator (docs/MODEL.md, "Deterministic simulator"): SEEDS seeds of
## the production Elector and GROUP_SEEDS seeds of the production Group against a simulated
## Redis running the project's scripts, their replay checks and the differential test against
## redis-server, and the directed workloads (Elector and Group scenarios). SEED=n (GROUP_SEED=n)
## replays one Elector (Group) seed and prints its trace;
## SIM_DURATION=1h runs Elector seeds for that long (soak); make mutants shows that it catches
## the known bugs of test/mutants. SIM_REDIS=0 leaves out the tests against redis-server
## (make test runs them too), so that only the timing-free seeds run (ci-lane).
SEEDS ?= 1000
GROUP_SEEDS ?= 100
.PHONY: sim
sim: test-deps
ifdef SEED
	SIM_SEED=$(SEED) SIM_SEEDS=1 SIM_TRACE=1 $(GO) test -count=1 -v -run '^TestSim$$' ./pkg/election
else ifdef GROUP_SEED
	SIM_SEED=$(GROUP_SEED) SIM_GROUP_SEEDS=1 SIM_TRACE=1 $(GO) test -count=1 -v -run '^TestSimGroup$$' ./pkg/election
else
	SIM_SEEDS=$(SEEDS) SIM_GROUP_SEEDS=$(GROUP_SEEDS) SIM_DURATION=$(SIM_DURATION) $(GO) test -count=1 -v -timeout 2h \
		-run '^(TestSim|TestSimReplaysIdentically|TestSimScenarios|TestSimGroup|TestSimGroupReplaysIdentically|TestSimGroupScenarios|TestRecorderTermWonBeforeDataLoss)$$' ./pkg/election
	if [ "$(SIM_REDIS)" != 0 ]; then \
		$(GO) test -count=1 -run '^(TestDifferentialAgainstRedis|TestTokenFromServerClock|TestScriptTypoFails)$$' ./internal/testing/sim; fi
endif

## mutants: every known bug kept as a patch in test/mutants is put back, one at a time, in a
## copy of the tree, and the tests its header names must fail there (hack/mutants.sh; NAMES=…
## runs some). The product carries no switch that re-introduces a bug.
mutants: test-deps
	hack/mutants.sh $(NAMES)

## demo: the README's first command.
demo:
	$(GO) run ./cmd/elector demo

## ci: every check of the main module and its satellite modules. .ci/run runs it in two parts
## side by side: ci-tests, whose tests and benchmark guards are timing-sensitive, in the
## foreground, and ci-lane at the lowest CPU priority beside it: what is CPU-bound, timing-free
## and not needed by ci-tests (the fuzz targets, the spin models, the simulator's seeds), so
## that it fills the cores the timing tests leave idle.
## ci-tests runs make test beside the satellite modules' checks (two make jobs; each target's
## output is printed whole when it ends), then the benchmark guards alone.
ci: ci-tests fuzz-smoke
ci-tests: lint
	$(MAKE) --no-print-directory -j2 --output-sync=target test satellites
	$(MAKE) --no-print-directory bench-quick
satellites: python-test build adapters-test check-adapters helm-test
ci-lane: SIM_REDIS = 0
ci-lane: fuzz-smoke model sim mutants
