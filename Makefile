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
VET_RACE  = echo "go vet -race ($1)" && cd $1 && $(GO) vet -race ./...
TEST_RACE = echo "go test -race ($1)" && cd $1 && $(GO) test -race -vet=off -count=1 ./...

# make test runs two jobs at once, for 2 cores, in two lanes:
# - lease/etcdlease, vetted and tested: its tests are the longest (~2.5 min,
#   mostly waiting on etcd), and its vet builds the standard library, grpc
#   and etcd's client with -race for everyone after it;
# - beside it, the server, whose build shares nothing with the others' (they
#   build with -race) and is the longest; then the other -race modules one
#   after another in LANE order (they share dependencies: two at once would
#   build them twice), the server's tests as soon as lease/k8slease (whose
#   -race build of client-go they share) is done.
# mod/<module> vets and tests one module (mod/root is the root module).
LANE := . lease/k8slease $(SERVER_TESTS) $(filter-out . lease/k8slease lease/etcdlease,$(RACE))
MODS := $(addprefix mod/,$(patsubst .,root,$(LANE)))
# chain makes each of its targets wait for the one before it.
chain = $(if $(word 2,$1),$(eval $(word 2,$1): | $(word 1,$1))$(call chain,$(wordlist 2,$(words $1),$1)))
$(call chain,server $(MODS))

.PHONY: test fmt vet race bench server mod/lease/etcdlease $(MODS)

test: fmt
	@$(MAKE) --no-print-directory -j2 --output-sync=target mod/lease/etcdlease server $(MODS)

fmt:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

mod/lease/etcdlease $(MODS): mod/%:
	@$(call VET_RACE,$(patsubst root,.,$*))
	@$(call TEST_RACE,$(patsubst root,.,$*))

# The server: vetted (which compiles all of it), tested (it has no tests
# today; any it gets run here), and linked into the go command's cache,
# where the tests' `go run` finds it.
server:
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(GO) vet ./...
	@echo "go test ($(SERVER))" && cd $(SERVER) && $(GO) test -vet=off -count=1 ./...
	@echo "go run -exec true ($(SERVER))" && cd $(SERVER) && $(GO) run -exec true .

# The server's tests start it: they wait for it to be built.
mod/$(SERVER_TESTS): server

vet:
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call VET_RACE,$$m)); done
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(GO) vet ./...

race: server
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call TEST_RACE,$$m)); done

bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count 1 ./...); done
