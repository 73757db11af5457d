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

# make test runs two jobs at once, for 2 cores:
# - mod/<module>: each -race module, vetted and tested, one after another in
#   LANE order (they share most dependencies: two at once would build them
#   twice); the root ("mod/root") first, whose packages all the others use,
#   then lease/k8slease, whose -race build of client-go the server's tests
#   share;
# - beside them, the server, whose build shares nothing with theirs (they
#   build with -race); then, once both it and mod/lease/k8slease are done,
#   the server's tests, beside the rest of the lane.
LANE := . lease/k8slease $(filter-out . lease/k8slease,$(RACE))
MODS := $(addprefix mod/,$(patsubst .,root,$(LANE)))
# chain makes each of its targets wait for the one before it.
chain = $(if $(word 2,$1),$(eval $(word 2,$1): | $(word 1,$1))$(call chain,$(wordlist 2,$(words $1),$1)))
$(call chain,$(MODS))

.PHONY: test fmt vet race bench server server-tests $(MODS)

test: fmt
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(MODS) server server-tests

fmt:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

$(MODS): mod/%:
	@$(call VET_RACE,$(patsubst root,.,$*))
	@$(call TEST_RACE,$(patsubst root,.,$*))

# The server: vetted (which compiles all of it), tested (it has no tests
# today; any it gets run here), and linked into the go command's cache,
# where the tests' `go run` finds it.
server:
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(GO) vet ./...
	@echo "go test ($(SERVER))" && cd $(SERVER) && $(GO) test -vet=off -count=1 ./...
	@echo "go run -exec true ($(SERVER))" && cd $(SERVER) && $(GO) run -exec true .

server-tests: server mod/lease/k8slease
	@$(call VET_RACE,$(SERVER_TESTS))
	@$(call TEST_RACE,$(SERVER_TESTS))

vet:
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call VET_RACE,$$m)); done
	@echo "go vet ($(SERVER))" && cd $(SERVER) && $(GO) vet ./...

race: server
	@set -e; for m in $(filter-out $(SERVER),$(MODULES)); do ($(call TEST_RACE,$$m)); done

bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count 1 ./...); done
