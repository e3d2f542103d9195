# contrib/async-fork/kernel.mk -- make targets of the Async-fork kernel
# harness: build Linux 6.12 (stock and patched) for a QEMU guest and run the
# fork-semantics suite in it. Included by the top-level Makefile; also usable
# alone from the top of the checkout:
#   make -f contrib/async-fork/kernel.mk kernel-test
# See contrib/async-fork/README.md.

AFORK_KDIR := contrib/async-fork
KERNEL_OUT ?= build/kernel
# The pinned upstream release names the build trees (the top-level Makefile
# includes the pin too; this is for `make -f contrib/async-fork/kernel.mk`).
include upstream/pin
REDIS_BIN_DIR ?= build/redis-$(REDIS_VERSION)/src

# The guest carries redis-server/-cli/-benchmark. When they are missing,
# build them first with the top-level `build` target; set KERNEL_REDIS_DEP=
# (empty) to never do that, or KERNEL_REDIS_DEP=build to always do it.
KERNEL_REDIS_DEP ?= $(if $(wildcard $(REDIS_BIN_DIR)/redis-server),,build) \
    $(if $(wildcard $(STOCK_REDIS_SERVER)),,stock)
# Stock Redis for the side-by-side Redis latency table in the guest.
STOCK_REDIS_SERVER ?= build/stock/redis-$(REDIS_VERSION)/src/redis-server

# The harness's knobs (kernel-test.sh --help, make kernel-help), and where
# the Redis programs are (from upstream/pin).
export KERNEL_TESTS KERNEL_SIZE KERNEL_BUDGET KERNEL_DEB KERNEL_OUT JOBS AFORK_ACCEL \
       REDIS_BIN_DIR STOCK_REDIS_SERVER AFORK_CACHE AFORK_APT_URI AFORK_APT_SUITES CCACHE_DIR

.PHONY: kernel-src kernel-build kernel-test kernel-test-full kernel-e2e kernel-boot kernel-trace kernel-patches \
        kernel-selftests kernel-kasan kernel-clean kernel-help \
        check-deps-kernel

# The harness's Debian packages, checked before anything starts (the
# message names the command that installs them: utils/install-deps.sh kernel).
check-deps-kernel:
	@utils/install-deps.sh --check kernel

# Fetch linux-source-6.12 (cached) and prepare the stock + patched trees.
kernel-src: check-deps-kernel
	@deb=$$($(AFORK_KDIR)/scripts/fetch-kernel.sh) && \
	    $(AFORK_KDIR)/scripts/kernel-tree.sh prepare "$$deb"

# Both kernels, the test suite and the initramfs.
kernel-build: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-test.sh build

# What CI runs: the series' correctness on its debug build (lockdep,
# DEBUG_VM, KUnit), the feature off against on; non-zero on failure.
kernel-test: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-test.sh test

# Everything: the stock, patched, configured-out and debug kernels, the
# suite on each, the mm selftests stock against patched, the short Redis
# latency experiment, tables; non-zero on failure.
kernel-test-full: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-test.sh full

# The full Redis latency experiment (README: "The Redis latency
# experiment"): stock kernel, patched vm.async_fork=2 and =1, 1024 and 1536
# MiB, 10 BGSAVEs per cell; hours under TCG (KERNEL_SIZE and KERNEL_TESTS,
# the cells, run a part).
kernel-e2e: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-test.sh e2e

# The kernel's own mm selftests (tools/testing/selftests/mm of the same
# source, static) on the stock kernel and the patched one with
# vm.async_fork=2, two NUMA nodes, and their comparison per program and case;
# non-zero when the patched kernel fails what the stock kernel passes.
# KERNEL_TESTS=mm-cow,mm-khugepaged runs a part (guest/mm-selftests list).
kernel-selftests: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-selftests.sh

# The patched kernel built with KASAN, DEBUG_PAGEALLOC, PREEMPT, lockdep
# and DEBUG_VM (config/kasan.config on top of debug.config, by
# scripts/build-kasan.sh): the suite (fault injection included) and the
# KUnit tests, then the mm selftests against the stock tree's KASAN build
# (the control for what only a slow kernel fails). Correctness only, never
# timings; hours under TCG, so not in kernel-test nor CI
# (contrib/async-fork/README.md says how long).
kernel-kasan: check-deps-kernel $(KERNEL_REDIS_DEP)
	@$(AFORK_KDIR)/scripts/kernel-test.sh kasan

# The tiers, the knobs and kernel-boot's arguments.
kernel-help:
	@$(AFORK_KDIR)/scripts/kernel-test.sh --help
	@echo
	@echo "One boot by hand after kernel-build (make kernel-boot):"
	@echo "  KERNEL=stock|patched|debug|trace  TESTS=all|STEP,...  SYSCTL=vm.async_fork=2"
	@echo "  TRACE=f1,f2 (trace build: function_graph of those)  INJECT=STEP,...|all"
	@echo "  (the steps break themselves on purpose: each must FAIL)"

# The patched kernel with ftrace (config/trace.config), for experiments
# only: tracing changes timings. After kernel-build (the initramfs).
kernel-trace: check-deps-kernel
	@$(AFORK_KDIR)/scripts/build-kernel.sh patched trace $(AFORK_KDIR)/config/async-fork.config \
	    $(AFORK_KDIR)/config/trace.config

# One boot by hand after kernel-build, e.g.
#   make kernel-boot KERNEL=patched TESTS=fork-loop,thp SYSCTL=vm.async_fork=2
# KERNEL=debug or trace boots that build of the patched tree; TRACE=f1,f2
# (trace build) prints a function_graph trace of those functions; INJECT=
# STEP,...|all breaks those steps on purpose (each must then FAIL).
KERNEL ?= stock
TESTS ?= all
SYSCTL ?=
TRACE ?=
INJECT ?=
BOOT_OUT ?= $(KERNEL_OUT)/boot-$(KERNEL)
kernel-boot:
	@$(AFORK_KDIR)/scripts/boot.sh --kernel $(KERNEL_OUT)/$(if $(filter debug trace,$(KERNEL)),patched/obj-$(KERNEL),$(KERNEL)/obj)/arch/x86/boot/bzImage \
	    --initrd $(KERNEL_OUT)/initramfs.cpio --out $(BOOT_OUT) --label $(KERNEL) --numa 2 \
	    --tests $(TESTS) $(if $(SYSCTL),--sysctl $(SYSCTL)) $(if $(TRACE),--append afork.trace=$(TRACE)) \
	    $(if $(INJECT),--inject $(INJECT))

# Export the commits of the patched worktree to contrib/async-fork/patches/.
kernel-patches:
	@$(AFORK_KDIR)/scripts/kernel-tree.sh export

# Build outputs of the kernels and the initramfs; the source trees, ccache
# and results stay (rm -rf build/kernel removes everything).
kernel-clean:
	rm -rf $(KERNEL_OUT)/stock/obj* $(KERNEL_OUT)/patched/obj* \
	    $(KERNEL_OUT)/initramfs $(KERNEL_OUT)/initramfs.cpio $(KERNEL_OUT)/bin
