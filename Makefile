# coldstart: make test runs what CI runs; make bench prints every package's benchmarks.

GO      ?= go
# Every module in the tree: the root and each nested go.mod (e.g. lease/etcdlease).
MODULES := . $(patsubst %/go.mod,%,$(patsubst ./%,%,$(shell find . -mindepth 2 -name go.mod -not -path './.git/*')))
BENCHTIME ?= 200ms
# Each module is vetted, tested and benchmarked against its own go.mod, as a
# user who requires it gets it: the root go.work (which lets
# `go run ./examples/hacontroller` build the examples module from the root)
# would otherwise resolve every module's dependencies together and hide a
# go.mod that is missing or behind.
export GOWORK := off

.PHONY: test fmt vet race bench

test: fmt vet race

fmt:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...); done

race:
	@set -e; for m in $(MODULES); do echo "go test -race ($$m)"; (cd $$m && $(GO) test -race -count=1 ./...); done

bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count 1 ./...); done
