# coldstart: make test runs what CI runs; make bench prints every package's benchmarks.

GO      ?= go
# Every module in the tree: the root and each nested go.mod (e.g. lease/etcdlease).
NESTED  := $(sort $(patsubst %/go.mod,%,$(patsubst ./%,%,$(shell find . -mindepth 2 -name go.mod -not -path './.git/*'))))
MODULES := . $(NESTED)
# The kube-apiserver that lease/k8slease's real-server tests start as a
# process of their own (`go run`): the heaviest build in the tree, built
# once, without the race detector (see its main.go). SERVER_TESTS are those
# tests; they run once the server is built.
SERVER       := lease/k8slease/internal/apiservertest/kubeapiserver
SERVER_TESTS := lease/k8slease/internal/apiservertest
# Every other module: vetted and tested with -race.
RACE    := $(filter-out $(SERVER) $(SERVER_TESTS),$(MODULES))
BENCHTIME ?= 200ms
# Each module is vetted, tested and benchmarked against its own go.mod, as a
# user who requires it gets it: the root go.work (which lets `go test ./...`
# work inside any module, and `go run ./examples/hacontroller` from the root)
# would otherwise resolve every module's dependencies together and hide a
# go.mod that is missing or behind.
export GOWORK := off

# A module is vetted with the flags its tests build with (-race), so that
# the vet and the tests share one build of its dependencies, and then tested
# with -vet=off (go test's own vet checks are a subset of go vet's).
# Each step prints how long it took.
timed     = { s=$$(date +%s); $1; rc=$$?; echo "  ($$(( $$(date +%s) - s ))s)"; exit $$rc; }
VET_RACE  = echo "go vet -race ($1)" && cd $1 && $(call timed,$(NICE) $(GO) vet -race ./...)
# staticcheck, pinned to a release that supports this Go, runs after each
# module's vet: built once (the tools target) into .bin, and run with
# GOFLAGS=-race, so that the export data it loads is the -race build the
# vet has just made and the tests reuse (without it, a cold run built every
# module's dependencies once more, without -race: ~270 CPU-seconds).
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(CURDIR)/.bin/$(STATICCHECK_VERSION)/staticcheck
LINT      = echo "staticcheck ($1)" && cd $1 && $(call timed,GOFLAGS=-race $(NICE) $(STATICCHECK) ./...)
TEST_RACE = echo "go test -race ($1)" && cd $1 && $(call timed,$(GO) test -race -vet=off -count=1 ./...)

# NICE runs the builds (go vet, which builds a module's dependencies, and
# the server's build) at the lowest CPU priority, and the tests at the
# normal one: many tests time real servers on the wall clock (etcd leases of
# a second, lease/etcdlease's fault tests, which time faults against etcd
# processes), and a compile beside them at equal priority can starve them
# long enough to fail (a fault that does not happen is a try that proves
# nothing; three in a row fail the test). Niced, the builds still get every
# cycle the tests leave, which is most of them. NICE= turns it off.
NICE ?= nice -n 19

# lease/etcdlease's tests take longest (~5 min one after another, mostly
# waiting on etcd), so make test runs them in lanes (see CONTRIBUTING.md),
# after its vet has built its dependencies once:
# - etcd/faults-a and etcd/faults-b: the fault tests, which start etcd
#   clusters of member processes and time faults on the wall clock (named
#   TestFault*, TestStale*, TestSnapshot*: ETCD_FAULTS), one at a time in
#   each lane; ETCD_FAULTS_B picks lane b's;
# - etcd/rest: every other test of the module, its single-member tests in
#   parallel (t.Parallel; ETCD_PARALLEL at once: they mostly wait);
# - etcd/alone, once the other three (and the small modules) are done: the
#   fault tests that run alone (ETCD_ALONE): the five-member snapshot test,
#   whose stale leader and lagging member need the CPU on time (beside the
#   other lanes it failed 2 runs in 14, alone 0 in 7).
# Every lane runs ./... with -run and -skip of the same patterns: together
# they run every test of every package once, as `go test ./...` in the
# module does (there, one fault test at a time, then the others, GOMAXPROCS
# at once); a fault lane runs one package at a time (-p 1).
ETCD          := lease/etcdlease
ETCD_FAULTS   := ^(TestFault|TestStale|TestSnapshot)
ETCD_FAULTS_B := ^(TestFaultStaleLeaderNeverTwoLeaders|TestFaultsOnMembers)$$
ETCD_ALONE    := ^TestSnapshot
ETCD_PARALLEL ?= 4
ETCD_TEST      = cd $(ETCD) && $(call timed,$(GO) test -race -vet=off -count=1 $1)
ETCD_LANES    := etcd/faults-a etcd/faults-b etcd/rest etcd/alone

# make test runs four jobs at once, for 2 cores, in two chains:
# - lease/etcdlease's vet, which builds the standard library, grpc and
#   etcd's client with -race for everyone after it, then its four test
#   lanes (above), two of which mostly wait on etcd; after its fault lane b
#   (the first to end), the small modules (SMALL) one after another, and
#   then etcd/alone;
# - beside it, the server, whose build shares nothing with the others' (they
#   build with -race) and is the longest; then the root module and
#   lease/k8slease, and the server's tests as soon as lease/k8slease (whose
#   -race build of client-go they share) is done.
# Modules in one chain run one after another: they share dependencies, and
# two at once would build them twice from empty caches.
# mod/<module> vets and tests one module (mod/root is the root module).
BIG   := . lease/k8slease $(SERVER_TESTS)
SMALL := $(filter-out $(BIG) $(ETCD),$(RACE))
mods   = $(addprefix mod/,$(patsubst .,root,$1))
MODS  := $(call mods,$(BIG) $(SMALL))
# chain makes each of its targets wait for the one before it.
chain = $(if $(word 2,$1),$(eval $(word 2,$1): | $(word 1,$1))$(call chain,$(wordlist 2,$(words $1),$1)))
$(call chain,server $(call mods,$(BIG)))
$(call chain,etcd/faults-b $(call mods,$(SMALL)) etcd/alone)
etcd/alone: | etcd/faults-a etcd/rest

# fuzz runs every fuzz target of every module (a func FuzzXxx in a
# _test.go file) for FUZZTIME each (2000 inputs: a count, not a time, which a loaded machine would spend on the corpus alone), with one worker (-parallel 1) and
# niced, so that it takes a core at most from the tests beside it; once
# the root module's tests have built what it shares with them. Their seed
# corpora (testdata/fuzz) also run in every plain go test.
FUZZTIME ?= 2000x
fuzz: | mod/root
	@echo "go test -fuzz (every module, $(FUZZTIME) a target)" && $(call timed,GCFLAGS='$(NOOPT_GCFLAGS)' $(NICE) bash .ci/fuzz $(FUZZTIME) $(MODULES))

# NOOPT_GCFLAGS compile without optimisation, inlining or DWARF what
# make test builds only to run, never to measure: the kube-apiserver test
# fixture (the heaviest build in the tree; measured on
# k8s.io/apiserver/pkg/server's 1,262 packages: 498 -> 346 CPU-seconds), a
# server the tests only start and talk to; and the fuzz binaries, whose
# coverage instrumentation the flags leave as it is.
NOOPT_GCFLAGS := all=-N -l -dwarf=false

.PHONY: test fmt vet race bench server tools fuzz postgres etcd/vet $(ETCD_LANES) $(MODS)

# (The small modules come in through etcd/alone's chain.)
test: fmt
	@$(MAKE) --no-print-directory -j4 --output-sync=target postgres $(ETCD_LANES) server $(call mods,$(BIG)) fuzz

# lease/sqllease's tests start a real PostgreSQL server (initdb and
# postgres, as the postgres system user when run as root): Debian's
# package, installed here when its binaries are missing (CI's fresh
# machines run as root with apt), at the start, beside the other jobs.
PG_FOUND = command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
postgres:
	@if ! ($(PG_FOUND)); then \
		echo "apt-get install -y postgresql (lease/sqllease's tests)"; \
		$(call timed,apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null); \
	fi
mod/lease/sqllease: | postgres

fmt:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

$(MODS): mod/%:
	@$(call VET_RACE,$(patsubst root,.,$*))
	@($(call LINT,$(patsubst root,.,$*)))
	@$(call TEST_RACE,$(patsubst root,.,$*))

# After the vet, the test binaries are built (and cached) once for the
# lanes, which would otherwise each build them from empty caches.
etcd/vet:
	@$(call VET_RACE,$(ETCD))
	@($(call LINT,$(ETCD)))
	@echo "go test -race -run '^$$' ($(ETCD): the test binaries)" && cd $(ETCD) && $(call timed,$(NICE) $(GO) test -race -vet=off -count=1 -run '^$$' ./...)

$(ETCD_LANES): etcd/vet

etcd/faults-a:
	@echo "go test -race ($(ETCD): fault tests, lane a)" && $(call ETCD_TEST,-p 1 -run '$(ETCD_FAULTS)' -skip '$(ETCD_FAULTS_B)|$(ETCD_ALONE)' ./...)

etcd/faults-b:
	@echo "go test -race ($(ETCD): fault tests, lane b)" && $(call ETCD_TEST,-p 1 -run '$(ETCD_FAULTS_B)' ./...)

etcd/alone:
	@echo "go test -race ($(ETCD): fault tests run alone)" && $(call ETCD_TEST,-p 1 -run '$(ETCD_ALONE)' ./...)

etcd/rest:
	@echo "go test -race ($(ETCD): all but the fault tests)" && $(call ETCD_TEST,-parallel $(ETCD_PARALLEL) -skip '$(ETCD_FAULTS)' ./...)

# The server: vetted (which compiles all of it), tested (it has no tests
# today; any it gets run here), and linked into the go command's cache,
# where the tests' `go run` finds it. It is the one module staticcheck
# leaves out: a test fixture of one short main.go, whose staticcheck
# type-checks all of Kubernetes from source again (126 s on a cold run,
# on the longest chain); go vet checks it. It is compiled with
# NOOPT_GCFLAGS, the flags the tests' `go run` gives, so that they find
# this build.
server:
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(call timed,$(NICE) $(GO) vet -gcflags='$(NOOPT_GCFLAGS)' ./...)
	@echo "go test ($(SERVER))" && cd $(SERVER) && $(call timed,$(NICE) $(GO) test -gcflags='$(NOOPT_GCFLAGS)' -vet=off -count=1 ./...)
	@echo "go run -exec true ($(SERVER))" && cd $(SERVER) && $(call timed,$(NICE) $(GO) run -gcflags='$(NOOPT_GCFLAGS)' -exec true .)

# tools builds staticcheck into .bin/<version>, once, before any module's
# lint (unless STATICCHECK names another one).
tools: $(filter $(CURDIR)/.bin/%,$(STATICCHECK))
$(CURDIR)/.bin/$(STATICCHECK_VERSION)/staticcheck:
	@echo "go install staticcheck@$(STATICCHECK_VERSION)" && $(call timed,GOBIN=$(dir $@) $(NICE) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION))
$(MODS) etcd/vet: | tools

# The server's tests start it: they wait for it to be built.
mod/$(SERVER_TESTS): server

vet: tools
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call VET_RACE,$$m)) && ($(call LINT,$$m)); done
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(GO) vet -gcflags='$(NOOPT_GCFLAGS)' ./...

race: server postgres
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call TEST_RACE,$$m)); done

bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count 1 ./...); done
