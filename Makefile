# Cairn — durable task and workflow engine on PostgreSQL.
# Without DATABASE_URL, `run` and `test` start a private PostgreSQL cluster
# from the machine's binaries (installed with apt-get on Debian as root).

GO       ?= go
ADDR     ?= 127.0.0.1:8080
# A count, not a duration: Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" when a -fuzztime duration ends (golang/go#75804).
FUZZTIME ?= 10000x

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -v addr='$(ADDR)' 'BEGIN {FS = ":.*?## "}; {gsub(/\$$\(ADDR\)/, addr, $$2); printf "  %-10s %s\n", $$1, $$2}'

.PHONY: run
run: ## Start the server with the demo on $(ADDR) (private PostgreSQL unless DATABASE_URL)
	@# Built, then run: under `go run` a Ctrl-C made the go command exit 1
	@# (make's "Error 1") however cleanly the server stopped.
	$(GO) build -o .cairn/bin/cairn-server ./cmd/server
	./.cairn/bin/cairn-server --addr $(ADDR) --demo

.PHONY: psql
psql: ## Open psql on DATABASE_URL, else on the private cluster of `make run` (.cairn/pg)
	@url="$$DATABASE_URL"; \
	if [ -z "$$url" ]; then \
		port=$$(cat .cairn/pg/port 2>/dev/null) || { echo "no private cluster in .cairn/pg yet: start one with make run, or set DATABASE_URL" >&2; exit 1; }; \
		url="postgres://postgres@127.0.0.1:$$port/postgres?sslmode=disable"; \
	fi; \
	psql=$$(command -v psql || ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1); \
	[ -n "$$psql" ] || { echo "psql not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)" >&2; exit 1; }; \
	exec "$$psql" "$$url"

FUZZ_TARGETS = ./engine:FuzzEnqueueInput ./engine:FuzzRegister ./web:FuzzAPI

.PHONY: test
test: ## Run every test (unit, integration, e2e), then each fuzz target briefly
	$(GO) test -count=1 -timeout 30m ./...
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$fn ($(FUZZTIME))"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

.PHONY: race
race: ## Run every test under the race detector (not part of test: it takes longer)
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: cairn
cairn: ## Build the cairn command line into bin/cairn (or: go install ./cmd/cairn)
	$(GO) build -o bin/cairn ./cmd/cairn

.PHONY: bench
bench: ## Run the benchmark scenarios against a private cluster and print a table
	$(GO) run ./cmd/bench -scenario all

.PHONY: chaos
chaos: ## Run the fault suite (crash, kills, partition...) on a private cluster; fails on a lost or duplicated task
	$(GO) run ./cmd/chaos -scenario all

.PHONY: generate
generate: ## Regenerate templ components (pinned tool)
	$(GO) tool templ generate

.PHONY: lint
lint: ## go vet and gofmt check
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: migrate
migrate: ## Apply pending migrations (DATABASE_URL required)
	$(GO) run ./cmd/migrate up
