# Makefile -- the redis-afork driver: fetch, patch, build, run, test, install.
#
# Upstream Redis is never committed here: upstream/fetch.sh downloads the
# pinned source (upstream/pin), upstream/tree.sh turns it into a git tree in
# build/ with the security layer (Debian's fixes, patches/security/) and our
# patches/ applied, and the upstream Makefile builds it. See README.md.

include upstream/pin
export REDIS_TARBALL REDIS_DEBIAN_TARBALL AFORK_APT_URI AFORK_CACHE

TREE   := build/redis-$(REDIS_VERSION)
STOCK  := build/stock/redis-$(REDIS_VERSION)
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
# Extra variables for upstream's make, e.g. REDIS_MAKE_FLAGS="BUILD_TLS=yes".
REDIS_MAKE_FLAGS ?=
# Parallel test clients for the Tcl suite (upstream's default is 16): make
# test's, and make test-upstream's, whose whole suite spends most of its
# time waiting.
TEST_CLIENTS ?= 4
UPSTREAM_TEST_CLIENTS ?= 8

.PHONY: all build tree stock fetch patches check-patches run test bench-stalls \
        test-upstream test-exporter bench install clean distclean rebase \
        deps deb test-deb $(CHECK_DEPS)

all: build

# Debian packages by what they are for (utils/install-deps.sh). Each goal
# checks its set before it starts and names the command that installs what
# is missing; `make deps GOAL...` installs the sets of the goals first
# (sudo when not root), e.g. `make deps run`, `make deps test`.
CHECK_DEPS := check-deps-build check-deps-test check-deps-bench check-deps-deb
deps_of = $(sort build \
    $(if $(filter test test-upstream,$(1)),test) \
    $(if $(filter bench,$(1)),bench) \
    $(if $(filter deb test-deb,$(1)),deb) \
    $(if $(filter kernel-%,$(1)),kernel))
deps:
	@utils/install-deps.sh $(if $(filter-out deps,$(MAKECMDGOALS)),$(call deps_of,$(MAKECMDGOALS)))

$(CHECK_DEPS):
	@utils/install-deps.sh --check $(@:check-deps-%=%)
# With deps among the goals, every check waits for it (also under make -j).
$(CHECK_DEPS) check-deps-kernel: $(filter deps,$(MAKECMDGOALS))

fetch: check-deps-build
	@upstream/fetch.sh

# Create build/redis-<version>, or re-apply patches/ after they changed.
tree: check-deps-build
	@upstream/tree.sh patched $(TREE)

build: tree
	@$(MAKE) -C $(TREE) -j$(JOBS) $(REDIS_MAKE_FLAGS)
	@echo "redis-afork built: $(TREE)/src/redis-server"

# Unpatched upstream (the security layer included), for side-by-side benchmarks.
stock: check-deps-build
	@upstream/tree.sh stock $(STOCK)
	@$(MAKE) -C $(STOCK) -j$(JOBS) $(REDIS_MAKE_FLAGS)
	@echo "stock Redis built: $(STOCK)/src/redis-server"

# Export the commits made in the build tree into patches/.
patches:
	@upstream/tree.sh export $(TREE)

# Fail when patches/ and the build tree disagree.
check-patches:
	@upstream/tree.sh check $(TREE) && echo "patches/ and $(TREE) agree."
	@. upstream/pin; if [ -f "$${AFORK_CACHE:-upstream/cache}/$$DEBIAN_TARBALL" ]; then \
	    contrib/debian/build.sh --check-series; \
	else echo "check-patches: $$DEBIAN_TARBALL not fetched yet; make deb checks the series over Debian's."; fi

# Move to another upstream release: make rebase REDIS_VERSION=X (docs/contributing.md,
# "Moving to a new Redis"). On the command line REDIS_VERSION overrides the
# pin's, so this is the new version; upstream/rebase.sh reads the old one.
rebase:
	@upstream/rebase.sh "$(REDIS_VERSION)"

# Start redis-afork in the foreground (Ctrl-C stops it, saving first).
run: build
	@utils/run.sh $(TREE)

test: check-deps-test build stock
	@TREE=$(TREE) TEST_CLIENTS=$(TEST_CLIENTS) tests/run.sh

# A Prometheus exporter (built with Go) scraping redis-afork's LATENCY events.
test-exporter: build
	@TREE=$(TREE) bash tests/exporter/run.sh

# Upstream's whole Tcl suite against redis-afork.
test-upstream: check-deps-test build
	@TREE=$(TREE) TEST_CLIENTS=$(UPSTREAM_TEST_CLIENTS) tests/run.sh --upstream-all

# Stock Redis and redis-afork side by side (docs/benchmarks.md): SIZES in GB,
# REPEAT interleaved repetitions; BENCH_FLAGS, any option of python3 -m
# forkbench (--scenario steady, --peer NAME=BINARY[:ARGS], ...).
SIZES ?= 1
REPEAT ?= 5
BENCH_FLAGS ?=
bench: check-deps-bench build stock
	@TREE=$(TREE) STOCK=$(STOCK) bench/run.sh --sizes "$(SIZES)" --repeat "$(REPEAT)" $(BENCH_FLAGS)

# What the main thread did during the worst client stalls of saves
# (forkbench.stalls, perf; docs/benchmarks.md): make bench-stalls STALLS_FLAGS="--size 4".
bench-stalls: check-deps-bench build stock
	@TREE=$(TREE) STOCK=$(STOCK) BENCH_MODULE=forkbench.stalls bench/run.sh $(STALLS_FLAGS)

# The C probes of the investigations (docs/investigations/ says how each
# is used), into build/bench-probes/.
BENCH_PROBES := $(patsubst bench/probes/%.c,build/bench-probes/%,$(wildcard bench/probes/*.c))
.PHONY: bench-probes
bench-probes: $(BENCH_PROBES)
build/bench-probes/%: bench/probes/%.c bench/probes/page_reporting.h
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -pthread -o $@ $< -lm

# The Async-fork kernel harness: make kernel-test (contrib/async-fork/README.md).
include contrib/async-fork/kernel.mk

# Programs to $(DESTDIR)$(PREFIX)/bin, redis.conf (with our options) to
# $(DESTDIR)$(SYSCONFDIR)/redis-afork/, where an existing one is kept.
install: build
	@$(MAKE) -C $(TREE) install PREFIX=$(DESTDIR)$(PREFIX)
	@conf=$(DESTDIR)$(SYSCONFDIR)/redis-afork/redis.conf; \
	if [ -e $$conf ] && ! cmp -s $(TREE)/redis.conf $$conf; then \
	    install -D -m 644 $(TREE)/redis.conf $$conf.default; \
	    echo "kept $$conf; the new one is $$conf.default"; \
	else \
	    install -D -m 644 $(TREE)/redis.conf $$conf && echo "installed $$conf"; \
	fi

# Debian packages (redis-afork-server, -tools, -sentinel; contrib/debian/)
# in build/deb/, and their test: install, serve as the unit does, purge
# (tests/deb/run.sh, on this machine), then in place over Debian's own
# redis-server of trixie and of the newest suite (tests/deb/upgrade.sh, in
# a trixie root). Both run; either failing fails the target.
deb: check-deps-deb
	@JOBS=$(JOBS) contrib/debian/build.sh build/deb

test-deb: deb
	@rc=0; tests/deb/run.sh build/deb || rc=1; tests/deb/upgrade.sh build/deb || rc=1; exit $$rc

# Build outputs only; the trees (and any commits in them) stay.
clean:
	@for t in $(TREE) $(STOCK); do \
	    if [ -d $$t ]; then $(MAKE) -C $$t distclean; fi; done

# Remove build/ entirely (not the download cache), unless the patched tree
# holds work that patches/ does not carry.
distclean:
	@if [ -d $(TREE)/.git ]; then upstream/tree.sh check $(TREE); fi
	rm -rf build
