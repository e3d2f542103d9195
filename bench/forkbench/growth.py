"""forkbench.growth -- the fill scenarios: what fork-thp costs while a dataset grows.

No fork anywhere in these scenarios (checked: total_forks stays 0, except
the large-values shape's own BGSAVE): they measure what huge pages cost
a server while its memory grows, which the fork scenarios never see.

  fill             an empty server filled to the size by redis-benchmark the
                   way a new user would: `-t set -r N -n 1.5N -d 256 -c 20
                   -P 16` (N: phases.keys_for_size, so that the keys written
                   reach the size), the PING probe beside it;
  fill-fragmented  the same, with most of the machine's other free memory
                   fragmented first (forkbench.fragment, sized by
                   fragment_plan so that the servers keep what they need);
  shapes           where THP has hurt Redis before, run by forkbench.shapes:
                   small instance, many instances, delete churn with
                   activedefrag, large values, maxmemory with eviction.

With the shapes they are the evidence for `fork-thp auto`. This module
runs the first two; the fill itself is forkbench.phases'.

Fill figures: the probe's worst round trip, p99.9, p99 and round trips
completed (and per second) during the fill; redis-benchmark's throughput
and latency; the fill's length; RSS empty and at the end, the server's
anonymous huge pages; the machine's /proc/vmstat deltas over the fill
(thp_fault_alloc, thp_fault_fallback, compact_stall, ...: machine-wide
counters, so another process's faults count too); redis-afork's INFO
fork: whether fork-thp is on (fork_thp_on; the reason, fork_thp_heap, in
fork_thp_heap.csv) and the fork_thp_tables_* fields when the server has
them. fill-fragmented adds the fragmenter's figures and the free memory
in 2 MiB blocks (/proc/buddyinfo) before, after fragmenting and at the
fill's end.
"""
import json
import shutil
import subprocess
import time

from .load import start_module
from .phases import (anon_huge_mb, fill, fill_keyspace, finish_memory, no_forks, prefixed,
                     read_text, rss_mb, run_tag, server_thp)
from .server import start_server
from .variants import GIB, MIB, MEMORY_EXTRA, memory_needed

# A 2 MiB block is order 9 of 4 KiB pages.
HUGE_ORDER = 9

# fill-fragmented: the fragmented share of the free memory left to the
# servers must be at least this ("most"), unless --fragment-max-gb caps it.
FRAGMENT_MIN_SHARE = 0.5


# ---------------------------------------------------------------- pure logic

def free_huge_mb(buddyinfo, order=HUGE_ORDER, page_kib=4):
    """Free memory in blocks of 2 MiB or more (order >= 9 of 4 KiB pages),
    MB, over every zone of /proc/buddyinfo."""
    total_pages = 0
    for line in buddyinfo.splitlines():
        if "zone" not in line:
            continue
        counts = [int(x) for x in line.split("zone", 1)[1].split()[1:]]
        total_pages += sum(n << k for k, n in enumerate(counts) if k >= order)
    return total_pages * page_kib / 1024.0


class FragmentRefused(Exception):
    """The machine has not the free memory to fragment beside the servers."""


def fragment_plan(available, need, max_bytes=None, min_share=FRAGMENT_MIN_SHARE,
                  keep=MEMORY_EXTRA):
    """How much the fragmenter maps when `available` bytes are free
    (MemAvailable) and the servers need `need`: it keeps half of what it
    maps, so the servers are left available - mapped/2, which must hold
    `need`; and it never maps more than available - `keep` (it touches it
    all first). Refused (FragmentRefused, saying why) when nothing can be
    fragmented, or when less than `min_share` of the free memory left to
    the servers would be fragmented, unless max_bytes (the user's cap)
    is what limits it."""
    room = min(2 * (available - need), available - keep)
    if room <= 0:
        raise FragmentRefused(
            "the servers need %.1f GiB and %.1f GiB is available: no memory left to fragment"
            % (need / GIB, available / GIB))
    mapped = room if max_bytes is None else min(room, max_bytes)
    left = available - mapped / 2
    share = (mapped / 2) / left
    if share < min_share and (max_bytes is None or mapped < max_bytes):
        raise FragmentRefused(
            "the servers need %.1f GiB and %.1f GiB is available: only %.0f%% of the free "
            "memory left to them could be fragmented (at least %.0f%% is asked); use a "
            "smaller size or free some memory"
            % (need / GIB, available / GIB, 100 * share, 100 * min_share))
    return {"mapped": int(mapped), "left": int(left), "share": share}


# ---------------------------------------------------------------- the machine

def buddy_free_huge_mb():
    return free_huge_mb(read_text("/proc/buddyinfo"))


def available():
    for line in read_text("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class Fragmenter:
    """forkbench.fragment running: most of the free memory fragmented
    until stop()."""

    def __init__(self, nbytes):
        self.free_before = buddy_free_huge_mb()
        t0 = time.time()
        self.proc = start_module("fragment", [str(nbytes)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError("the fragmenter failed (exit status %s)" % self.proc.returncode)
        self.info = json.loads(line[len("ready "):])
        self.seconds = time.time() - t0

    def figures(self, share):
        return {"fragment_mapped_mb": self.info["mapped"] / MIB,
                "fragment_kept_mb": self.info["kept"] / MIB,
                "fragment_share": share, "fragment_s": self.seconds,
                "free_2m_before_mb": self.free_before,
                "free_2m_after_mb": buddy_free_huge_mb()}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- the fill

def start_fragmenter(args, run, say):
    need = memory_needed(run.size, run.variant, args.scenario)
    cap = None if args.fragment_max_gb is None else int(args.fragment_max_gb * GIB)
    plan = fragment_plan(available(), need, cap)
    say("fragmenting %.2f GiB of free memory (%.0f%% of what the server is left)"
        % (plan["mapped"] / GIB, 100 * plan["share"]))
    frag = Fragmenter(plan["mapped"])
    return frag, frag.figures(plan["share"])


def fill_scenario(run, args, say, tag):
    """One fill (see the module's comment)."""
    fig = {"keys": fill_keyspace(args, run.size, args.value_size)}
    frag = None
    try:
        if args.scenario == "fill-fragmented":
            frag, got = start_fragmenter(args, run, say)
            fig.update(got)
        srv, work = start_server(run.variant, args)
        try:
            time.sleep(0.2)
            fig["empty_rss_mb"] = rss_mb(srv)
            say("fill: redis-benchmark -r %d -n %.3gx, %d clients, -P %d"
                % (fig["keys"], args.fill_requests, args.fill_clients, args.fill_pipeline))
            fig.update(prefixed("fill_", fill(srv, args, fig["keys"], args.value_size,
                                              tag + "_fill")))
            no_forks(srv, "the fill")
            fig["fill_dbsize"] = srv.conn.call("DBSIZE")
            fig["used_memory_mb"] = int(srv.info("memory")["used_memory"]) / MIB
            huge = anon_huge_mb(srv)
            if huge is not None:
                fig["anon_huge_mb"] = huge
            server_thp(srv, args, run, fig)
            if frag is not None:
                fig["free_2m_end_mb"] = buddy_free_huge_mb()
            finish_memory(srv, fig)
        finally:
            srv.stop()
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if frag is not None:
            frag.stop()
    return fig


def run_fill(run, args, say):
    """One server, one size, one repetition of the fill or fill-fragmented
    scenario (args.scenario says which): its figures."""
    return fill_scenario(run, args, say, run_tag(run))
