"""forkbench.tables: the docs' tables and headline generated from committed
results folders, --update and --check, and the refusals."""
import os
import subprocess
import sys

import pytest

from forkbench import tables

from conftest import BENCH, TOP, fork_values, write_results

DOC = """# t

<!-- bench-headline: res -->
stale headline
<!-- /bench-headline -->

text between

<!-- bench-tables: res -->
stale
<!-- /bench-tables -->
"""


def run(*args):
    env = dict(os.environ, PYTHONPATH=BENCH)
    return subprocess.run([sys.executable, "-m", "forkbench.tables"] + list(args),
                          capture_output=True, text=True, env=env)


def results(repo, name="res", **kw):
    vals = fork_values([120, 125, 130], [3.0, 3.2, 3.4], [130, 135, 140], [10, 12, 14])
    return write_results(str(repo / name), vals, **kw)


@pytest.fixture
def doc(git_repo):
    results(git_repo)
    (git_repo / "docs").mkdir()
    path = git_repo / "docs" / "benchmarks.md"
    path.write_text(DOC)
    return path


def test_refuses_results_that_are_not_committed(doc):
    r = run("--update", str(doc))
    assert r.returncode != 0 and "res: not committed" in r.stderr


def test_update_fills_both_blocks_and_check_accepts(doc, git_repo):
    git_repo.commit("res")
    assert run("--update", str(doc)).returncode == 0
    text = doc.read_text()
    assert "stale" not in text and "text between" in text
    # folders are named from the checkout's top, also from docs/
    head = text.split("<!-- /bench-headline -->")[0]
    assert "| 1 GB | stock | 125 [120–130] | 135 [130–140] |" in head
    # a folder whose server version is unknown predates fork-thp auto's default
    assert "| 1 GB | redis-afork, fork-thp no | 3.20 [3.00–3.40] (0.03x) | 12 [10–14] (0.09x) |" in head
    body = text.split("<!-- bench-tables: res -->")[1]
    assert "| 1 GB | stock | redis-afork | redis-afork / stock | verdict |" in body
    # three runs against three: the rank test cannot call it
    assert "within noise" in body and "better" not in body
    r = run("--check", str(doc))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("edit", [("within noise", "better"), ("(0.09x)", "(0.05x)")])
def test_check_notices_a_hand_edit_in_either_block(doc, git_repo, edit):
    git_repo.commit("res")
    run("--update", str(doc))
    doc.write_text(doc.read_text().replace(*edit, 1))
    r = run("--check", str(doc))
    assert r.returncode != 0 and "differ from the committed results" in r.stderr


def test_check_notices_results_changed_after(doc, git_repo):
    git_repo.commit("res")
    run("--update", str(doc))
    # the same folder committed again with other figures
    vals = fork_values([120, 125, 130], [3.0, 3.2, 3.4], [130, 135, 140], [20, 22, 24])
    write_results(str(git_repo / "res"), vals)
    git_repo.commit("res")
    assert run("--check", str(doc)).returncode != 0


def test_a_file_without_a_block_is_refused(git_repo):
    path = git_repo / "plain.md"
    path.write_text("# nothing here\n")
    r = run("--check", str(path))
    assert r.returncode != 0 and "no <!-- bench-tables" in r.stderr


def test_refuses_dirty_results_unless_the_marker_allows(git_repo):
    results(git_repo, "dirty", dirty=True)
    git_repo.commit("dirty")
    with pytest.raises(tables.Refused, match="uncommitted changes"):
        tables.generate(["dirty"], str(git_repo), set())
    with pytest.raises(tables.Refused, match="uncommitted changes"):
        tables.headline(["dirty"], str(git_repo), set())
    out = tables.generate(["dirty"], str(git_repo), {"dirty"})
    assert "**Not fit to publish**: taken on uncommitted changes" in out
    r = run(str(git_repo / "dirty"))
    assert r.returncode != 0 and "uncommitted changes" in r.stderr


def test_refuses_unequal_key_counts(git_repo):
    vals = fork_values([1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3])
    vals[(1.0, "redis-afork", "keys")] = [1000, 1000, 999]
    write_results(str(git_repo / "keys"), vals)
    with pytest.raises(tables.Refused, match="key counts differ"):
        tables.generate(["keys"], str(git_repo), set())
    assert "key counts differ" in tables.generate(["keys"], str(git_repo), {"unequal-keys"})


def test_steady_folders_get_their_targets(git_repo):
    vals = {}
    for v, fork in (("stock", [100, 101, 102]), ("afork-thp-collapse", [3, 3.1, 3.2])):
        vals[(8.0, v, "steady_fork_ms_median")] = fork
        vals[(8.0, v, "steady_max_ms_median")] = [f * 2 for f in fork]
    write_results(str(git_repo / "st"), vals, variants=("stock", "afork-thp-collapse"),
                  scenario="steady")
    out = tables.generate(["st"], str(git_repo), set())
    assert "| 8 GB: afork-thp-collapse's targets (heap in huge pages) |" in out
    head = tables.headline(["st"], str(git_repo), set())
    assert "| 8 GB, steady state | redis-afork, fork-thp yes | 3.10 [3.00–3.20] (0.03x) |" in head


def test_docs_results_tables_are_the_committed_results():
    r = run("--check", os.path.join(TOP, "docs", "results.md"))
    assert r.returncode == 0, r.stderr


def test_readme_headline_is_the_committed_results():
    # README.md carries the headline block (the lead's --update fills it).
    path = os.path.join(TOP, "README.md")
    assert "<!-- bench-headline: " in open(path).read(), "README.md has no bench-headline block"
    r = run("--check", path)
    assert r.returncode == 0, r.stderr


def test_a_marker_quoted_in_a_code_block_is_not_a_block(doc, git_repo):
    git_repo.commit("res")
    doc.write_text("How to publish:\n\n    <!-- bench-tables: bench/results/<folder> -->\n\n"
                   + DOC)
    assert run("--update", str(doc)).returncode == 0
    assert "    <!-- bench-tables: bench/results/<folder> -->\n" in doc.read_text()
    assert run("--check", str(doc)).returncode == 0


def site_values(p, idle, size=4.0):
    """Three repetitions of stock and redis-afork at one fork site."""
    vals = {}
    for v, fork, stall in (("stock", [120, 125, 130], [130, 140, 150]),
                           ("redis-afork", [3.0, 3.2, 3.4], [10, 12, 14])):
        vals[(size, v, idle)] = fork
        vals[(size, v, p + "_fork_ms")] = fork
        vals[(size, v, p + "_max_ms")] = stall
        vals[(size, v, p + "_max_gap_ms")] = [s - 1 for s in stall]
        vals[(size, v, p + "_s")] = [20.0, 21.0, 22.0]
        vals[(size, v, p + "_child_s")] = [18.0, 19.0, 20.0]
        vals[(size, v, p + "_cow_mb")] = [3700, 3710, 3720]
        vals[(size, v, p + "_window_rps")] = [200000, 210000, 220000]
        vals[(size, v, "nosave_rps")] = [230000, 240000, 250000]
        vals[(size, v, p + "_load_s")] = [60.0] * 3
        vals[(size, v, "keys")] = [1000] * 3
    return vals


@pytest.mark.parametrize("scenario,p,idle,where", [
    ("aofrewrite", "rewrite", "idle_rewrite_fork_ms", "AOF rewrite"),
    ("sync-disk", "sync", "idle_fork_ms_median", "full sync (disk)"),
    ("sync-diskless", "sync", "idle_fork_ms_median", "full sync (diskless)")])
def test_fork_site_folders_get_their_tables_and_headline(git_repo, scenario, p, idle, where):
    write_results(str(git_repo / "site"), site_values(p, idle), scenario=scenario)
    out = tables.generate(["site"], str(git_repo), set())
    assert out.splitlines()[1].startswith("**%s scenario**, `site`" % scenario)
    what = p if p == "sync" else "rewrite"
    assert "| under load: fork for the %s, parent blocked (ms) | 125 [120–130] | " \
           "3.20 [3.00–3.40] | 0.03 (" % what in out
    assert "| during the %s: longest PING gap (ms) | 139 [129–149] |" % what in out
    assert "| during the %s: SET throughput (req/s) | 210000 [200000–220000] |" % what in out
    assert "| no save: SET throughput (req/s) |" in out
    # figures the docs do not show stay in results.md only; no fork-thp targets
    assert "load length" not in out and "targets" not in out
    head = tables.headline(["site"], str(git_repo), set())
    assert "| 4 GB, %s | stock | 125 [120–130] | 140 [130–150] |" % where in head
    assert "| 4 GB, %s | redis-afork, fork-thp no | 3.20 [3.00–3.40] (0.03x) | 12 [10–14] (0.09x) |" \
        % where in head


def test_a_run_with_reporting_held_says_so_in_its_heading():
    from forkbench import report
    path = "bench/results/fill-2-4-20261128"
    res = report.read(os.path.join(TOP, path))
    assert "free page reporting held back" in tables.heading(res, path)
    res.machine["reporting_held"] = False
    assert "free page reporting held back" not in tables.heading(res, path)


def test_headline_names_the_default_the_run_had():
    class Res:
        def __init__(self, server):
            self.machine = {"redis_afork": server}
    assert tables.headline_name(Res("Redis server v=8.6.3 afork=0.2.0"), "redis-afork") == \
        "redis-afork, fork-thp no"
    assert tables.headline_name(Res("Redis server v=8.6.3 afork=0.3.0"), "redis-afork") == \
        "redis-afork, fork-thp auto"
    assert tables.headline_name(Res(None), "afork-thp-collapse") == "redis-afork, fork-thp yes"
