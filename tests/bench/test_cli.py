"""python3 -m forkbench's options: what make bench refuses up front."""
import os
import subprocess
import sys

from conftest import BENCH


def bench(*args):
    env = dict(os.environ, PYTHONPATH=BENCH)
    return subprocess.run([sys.executable, "-m", "forkbench", "--afork-bin", "/nonexistent",
                           "--stock-bin", "/nonexistent", "--out", "/nonexistent/out"]
                          + list(args), capture_output=True, text=True, env=env)


def test_sizes_must_be_numbers():
    r = bench("--sizes", "1 lots")
    assert r.returncode == 2 and "--sizes: '1 lots' is not" in r.stderr


def test_sizes_must_be_positive():
    assert "--sizes: give one or more sizes above 0" in bench("--sizes", "0").stderr


def test_repeat_at_least_one():
    assert "--repeat: give 1 or more" in bench("--repeat", "0").stderr


def test_unknown_variant():
    assert "unknown variant 'nope'" in bench("--variants", "stock nope").stderr


def test_replica_variant_only_for_a_known_variant_of_a_sync():
    assert "only the sync scenarios" in bench("--replica-variant", "stock").stderr
    r = bench("--scenario", "sync-disk", "--replica-variant", "nope")
    assert r.returncode == 2 and "--replica-variant: unknown variant 'nope'" in r.stderr


def test_peer_given_twice_and_bad_peer():
    assert "given twice" in bench("--peer", "a=/bin/true", "--peer", "a=/bin/true").stderr
    assert "--peer" in bench("--peer", "noequals").stderr


def test_builds_must_exist():
    r = bench("--sizes", "1")
    assert r.returncode == 2 and "no redis-server in /nonexistent" in r.stderr
    assert not os.path.exists("/nonexistent/out")


def test_a_relative_peer_path_is_made_absolute(tmp_path, monkeypatch):
    # servers run in folders of their own, so a peer named relative to the
    # caller's folder must be resolved before they start
    import argparse
    from forkbench import cli
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "redis-server").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "redis-server").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    a = argparse.Namespace(sizes="1", repeat=2, idle_saves=3, rounds=3, pass_margin_seconds=3.0,
                           variants=None, scenario="fork", peer=["p=bin/redis-server"], seed=1,
                           afork_bin=str(tmp_path / "bin"), stock_bin=str(tmp_path / "bin"))
    cli.check_args(argparse.ArgumentParser(), a)
    assert a.peers["p"]["binary"] == str(tmp_path / "bin" / "redis-server")


def test_hold_reporting_holds_and_gives_back(tmp_path, monkeypatch):
    # the parameters' folder of a kernel that has them, in a scratch folder
    from forkbench import machine
    (tmp_path / "min_free_ms").write_text("0\n")
    (tmp_path / "max_waiting_mib").write_text("1024\n")
    monkeypatch.setattr(machine, "REPORTING", str(tmp_path))
    was = machine.hold_reporting()
    assert was == {"min_free_ms": 0, "max_waiting_mib": 1024}
    held = machine.reporting_state()
    assert held["min_free_ms"] == machine.HOLD_MS
    assert held["max_waiting_mib"] * machine.MIB >= machine.meminfo("MemTotal")
    machine.set_reporting(was)
    assert machine.reporting_state() == was


def test_hold_reporting_takes_a_kernels_cap(tmp_path, monkeypatch):
    # a kernel that refuses min_free_ms above 5 minutes (EINVAL), as some do
    import errno
    from forkbench import machine
    (tmp_path / "min_free_ms").write_text("0\n")
    (tmp_path / "max_waiting_mib").write_text("1024\n")
    monkeypatch.setattr(machine, "REPORTING", str(tmp_path))
    write = machine.write_parameter

    def capped(path, value):
        if path.endswith("min_free_ms") and value > 300000:
            raise OSError(errno.EINVAL, "Invalid argument")
        write(path, value)
    monkeypatch.setattr(machine, "write_parameter", capped)
    machine.hold_reporting()
    assert machine.reporting_state()["min_free_ms"] == 300000


def test_hold_reporting_refused_where_the_kernel_cannot(tmp_path, monkeypatch):
    from forkbench import machine
    monkeypatch.setattr(machine, "REPORTING", str(tmp_path / "absent"))
    try:
        machine.hold_reporting()
    except ValueError as e:
        assert "cannot hold free page reporting back" in str(e)
    else:
        raise AssertionError("hold_reporting() did not refuse")


def test_memory_touched_again_only_under_a_capped_hold(monkeypatch):
    # a block left free longer than a capped hold is reported between runs:
    # the run's memory is touched again before each run then, and only then
    import argparse
    from forkbench import cli, machine
    touched = []
    monkeypatch.setattr(machine, "pretouch_reported",
                        lambda n: touched.append(n) or {"gib": n / machine.GIB, "seconds": 0.1,
                                                        "reported_kib": 0})
    said = []

    def run(held, nbytes=3 << 30):
        a = argparse.Namespace(reporting_held=held, pretouch_bytes=nbytes)
        cli.touch_again(a, said.append)
    run(None)
    run({"min_free_ms": machine.HOLD_MS, "max_waiting_mib": 1})
    run({"min_free_ms": 300000, "max_waiting_mib": 1}, nbytes=0)
    assert touched == []
    run({"min_free_ms": 300000, "max_waiting_mib": 1})
    assert touched == [3 << 30]
    assert "touched again" in said[0] and "300 s" in said[0]


def test_pretouch_touches_in_huge_pages_where_the_kernel_gives_them():
    # a heap in huge pages gets whole 2 MiB blocks: the pre-touch must back
    # such blocks, not 4 KiB pages scattered over the free lists
    from forkbench import machine
    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except FileNotFoundError:
        mode = "[never]"  # a kernel without THP
    def faults():
        # huge-page faults, whether they got a huge page or fell back
        v = dict(line.split() for line in open("/proc/vmstat"))
        return int(v.get("thp_fault_alloc", 0)) + int(v.get("thp_fault_fallback", 0))
    before = faults()
    t = machine.pretouch(64 * machine.MIB)
    assert t["gib"] >= 0.06
    if "[never]" in mode:
        assert faults() == before
    else:
        assert faults() - before >= 16


def test_pretouch_reported_says_what_the_vm_reported_after_it(monkeypatch):
    from forkbench import machine
    monkeypatch.setattr(machine, "pretouch", lambda n: {"gib": 1.0, "seconds": 0.1})
    counter = iter([1000, 1600])
    monkeypatch.setattr(machine, "reported_kib", lambda: next(counter))
    assert machine.pretouch_reported(1 << 30, settle_s=0)["reported_kib"] == 600
    monkeypatch.setattr(machine, "reported_kib", lambda: None)
    assert machine.pretouch_reported(1 << 30, settle_s=0)["reported_kib"] is None
