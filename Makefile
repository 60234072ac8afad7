# VCCL-Go. `make run` runs a local job with telemetry; `make test` is what CI runs.
GO      ?= go
BIN     := bin
RANKS   ?= 2
PKGS    := ./...
CORE    := ./flowtel/... ./transport/... ./collective/...

.PHONY: all build test test-full race bench check-deps run lint staticcheck fmt clean fault-full fuzz

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The default suite: vet, staticcheck, layering, every unit and conformance
# test (collective's TestReduceKernelsGenerated checks that the generated
# kernels are current), the comm library under the race detector (the
# collective matrix sampled), and the analyzer on fresh jobs with real
# faults. Those jobs run alone: they bring their own load (busy loops, more
# ranks than cores), and another package's tests beside them are load the
# runs are not labelled with. So do the fault-tolerance timings (test/fault):
# a path's allowed silence grows with the starvation its monitor measures
# (docs/fault-tolerance.md), so failover latency measured beside another
# package's tests measures their load.
DIAG    := ./test/diagnosis
FAULT   := ./test/fault
test: check-deps lint
	$(GO) test -count=1 $$($(GO) list $(PKGS) | grep -v -e '/test/diagnosis$$' -e '/test/fault$$')
	$(GO) test -count=1 $(FAULT)
	$(GO) test -race -short -count=1 $(CORE)
	$(GO) test -count=1 -timeout 20m $(DIAG)

# Every cell of the collective matrix and the schedule simulator, every world
# size, large counts.
test-full: check-deps
	VCCL_TEST_FULL=1 $(GO) test -count=1 -timeout 60m $(PKGS)

race:
	$(GO) test -race -count=1 $(CORE)

# The fault-tolerance harness with the acceptance counts of
# docs/fault-tolerance.md (needs root: network namespaces). make test runs it
# with fewer all-reduces and trials.
fault-full:
	VCCL_FAULT_FULL=1 $(GO) test -count=1 -v -timeout 30m ./test/fault/ ./transport/ft/

# Every fuzz target of the packages that read what others send (the store,
# the handshakes, ft frames, traces, vccl-top's parsers) for FUZZTIME each.
# New inputs are minimized for at most 10 runs: with go test's default (60 s
# each) FuzzReader spent its time minimizing and ran ~20 inputs in 45 s.
FUZZTIME ?= 30s
FUZZ_PKGS := ./collective/bootstrap ./transport ./transport/tcp ./transport/ft ./flowtel ./exporter/arrow ./ui/source
fuzz:
	@set -e; for pkg in $(FUZZ_PKGS); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10x $$pkg; \
		done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(CORE)

# collective, transport and flowtel must not pull in OTel, Prometheus, Arrow,
# Bubble Tea or NVML.
check-deps:
	@bad=$$($(GO) list -deps $(CORE) | grep -E 'go.opentelemetry.io|prometheus/|apache/arrow|bubbletea|charm.land|charmbracelet|go-nvml' | sort -u); \
	if [ -n "$$bad" ]; then echo "check-deps: the comm library imports:"; echo "$$bad"; exit 1; fi; \
	echo "check-deps: collective, transport and flowtel are light"

run: build
	$(BIN)/vcclrun -n $(RANKS) -- $(BIN)/vccl-demo

lint: staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	GOOS=darwin $(GO) vet $(PKGS)   # builds off Linux too (shm, CMA and tcp_info have fallbacks)
	GOARCH=arm64 $(GO) vet $(CORE)   # and off amd64 (pure-Go kernels, no TSC)
	GOARCH=386 $(GO) vet $(PKGS)     # and where int has 32 bits
	$(STATICCHECK) $(PKGS)

# staticcheck at the version lint expects, installed through the Go proxy
# where go install puts programs (GOBIN, else the first GOPATH's bin) unless
# that version is there already.
STATICCHECK_VERSION := 0.8.2
STATICCHECK := $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)/staticcheck
staticcheck:
	@if $(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION))'; then \
		echo "staticcheck: $(STATICCHECK) $(STATICCHECK_VERSION)"; \
	else \
		echo "staticcheck: go install honnef.co/go/tools/cmd/staticcheck@v$(STATICCHECK_VERSION)"; \
		GOFLAGS=-buildvcs=false $(GO) install honnef.co/go/tools/cmd/staticcheck@v$(STATICCHECK_VERSION); \
	fi

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
