"""forkbench: stock Redis, redis-afork and any RESP server side by side, what
a fork costs them (make bench), where a save's client stalls come from
(make bench-stalls), and the tables the docs show (forkbench.tables).

Entry points (bench/ on PYTHONPATH; bench/run.sh sets it up):
    python3 -m forkbench            make bench (cli)
    python3 -m forkbench.stalls     make bench-stalls
    python3 -m forkbench.tables     the docs' tables, --update / --check
    python3 -m forkbench.targets    fork-thp's targets of a steady run

make bench runs each --scenario through registry, which names the function
that runs it: fork, steady, sites (aofrewrite, sync-disk, sync-diskless),
growth (fill, fill-fragmented) and shapes, one module each, which build on
phases (what they share) and never import one another. A new scenario is
one module and one line in registry.
"""
