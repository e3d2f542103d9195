"""forkbench.fragment -- leave the machine's free memory fragmented in 4 KiB pieces.

The fill-fragmented scenario (forkbench.growth) runs this beside the
server: a process that maps NBYTES of anonymous memory (in 4 KiB pages,
MADV_NOHUGEPAGE), touches every page, then gives back every other page
(MADV_DONTNEED on the odd pages) and keeps the rest until SIGTERM. The
pages it gave back are free but no two of them are neighbours, so a
huge-page fault finds no free 2 MiB block among them and has to compact
(move the kept pages) or fall back to small pages: the host whose free
memory is fragmented.

    python3 -m forkbench.fragment NBYTES

Prints one line, "ready {json}" (mapped and kept bytes, seconds), once the
memory is fragmented; exits on SIGTERM (or when its stdin closes), which
frees the rest. How much to map, so that the servers keep what they need:
forkbench.growth.fragment_plan.
"""
import json
import mmap
import select
import signal
import sys
import time


def fragment(nbytes):
    """Map, touch, and free every other page of `nbytes`; the mapping and
    what was done."""
    page = mmap.PAGESIZE
    nbytes -= nbytes % (2 * page)
    t0 = time.time()
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        # small pages whatever the THP mode: a huge page given back 4 KiB
        # at a time would only be split, not leave free holes
        mm.madvise(mmap.MADV_NOHUGEPAGE)
    mm[::page] = b"\x01" * (nbytes // page)
    touched = time.time()
    for off in range(page, nbytes, 2 * page):
        mm.madvise(mmap.MADV_DONTNEED, off, page)
    done = time.time()
    return mm, {"mapped": nbytes, "kept": nbytes // 2, "freed": nbytes // 2,
                "touch_s": round(touched - t0, 3), "free_s": round(done - touched, 3)}


def main():
    nbytes = int(sys.argv[1])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    mm, info = fragment(nbytes)
    print("ready " + json.dumps(info), flush=True)
    while not stop:
        # the parent going away closes stdin: the memory is not held for nobody
        r, _, _ = select.select([sys.stdin], [], [], 0.5)
        if r and not sys.stdin.buffer.read1(1):
            break
    mm.close()


if __name__ == "__main__":
    main()
