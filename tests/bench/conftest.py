"""The bench's unit tests: forkbench's modules on fixed inputs (pytest,
from the bench's venv; tests/run.sh runs them in make test)."""
import csv
import json
import os
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(TOP, "bench")
sys.path.insert(0, BENCH)


def write_results(folder, values, variants=("stock", "redis-afork"), scenario="fork",
                  dirty=False, describe="abc1234"):
    """A results folder as make bench writes it: values maps
    (size, variant, metric) to one value per repetition."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["size_gb", "variant", "rep", "metric", "value"])
        for (size, variant, metric), vals in values.items():
            for rep, v in enumerate(vals, 1):
                w.writerow(["%g" % size, variant, rep, metric, v])
    machine = {"date_utc": "2026-11-26 10:00:00", "scenario": scenario, "dirty": dirty,
               "variants": {v: [] for v in variants}, "baseline": variants[0],
               "kernel": "6.1.0", "cpus": 2, "cpu": "test cpu", "thp_enabled": "[madvise]",
               "source": {"checkout": {"describe": describe, "commit": "0" * 40}}}
    with open(os.path.join(folder, "machine.json"), "w") as f:
        json.dump(machine, f)
    return folder


def fork_values(stock_fork, afork_fork, stock_max, afork_max, size=1.0, keys=1000):
    vals = {}
    for v, fork, mx in (("stock", stock_fork, stock_max), ("redis-afork", afork_fork, afork_max)):
        vals[(size, v, "save_fork_ms")] = fork
        vals[(size, v, "idle_fork_ms_median")] = fork
        vals[(size, v, "save_max_ms")] = mx
        vals[(size, v, "nosave_max_ms")] = [x / 2 for x in mx]
        vals[(size, v, "save_vs_control_max")] = [2.0] * len(mx)
        vals[(size, v, "keys")] = [keys] * len(mx)
    return vals


class Repo:
    """A git checkout in a temporary folder: repo / "name" is a path in it,
    repo.commit(*paths) commits those paths."""

    def __init__(self, path):
        self.path = path
        subprocess.run(["git", "init", "-q", str(path)], check=True)

    def __truediv__(self, name):
        return self.path / name

    def __str__(self):
        return str(self.path)

    def commit(self, *paths):
        subprocess.run(["git", "-C", str(self.path), "add", "--"] + list(paths), check=True)
        subprocess.run(["git", "-C", str(self.path), "-c", "user.name=t", "-c",
                        "user.email=t@localhost", "commit", "-qm", "results"], check=True)


@pytest.fixture
def git_repo(tmp_path):
    return Repo(tmp_path)
