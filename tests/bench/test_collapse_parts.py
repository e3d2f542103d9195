"""bench/probes/collapse_parts.py, the reader of collapse_parts.sh's runs, on
fixed inputs: read_stall's stretches by window, the VM's free page reports
beside."""
import contextlib
import io
import os
import sys

from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "bench", "probes"))
import collapse_parts  # noqa: E402


def test_collapse_parts_windows_and_reports(tmp_path):
    # a control and one run whose child exits at 1100 s; a stretch of 60 ms
    # on a CPU at 1105 s beside a report of 512 MiB sampled at 1105.5 s;
    # one before the child, in the fill.
    (tmp_path / "marks.txt").write_text(
        "1000.0 start control\n1030.0 end control\n1080.0 start held-redo\n"
        "1140.0 end held-redo\n")
    (tmp_path / "collapse_stall.txt").write_text(
        "mode held-redo\nchild_exited 1100.0 reporting_passes 7\n")
    (tmp_path / "read_stall.txt").write_text(
        "1010.0 4.0 0.5 3.5 3.0\n1090.0 9.0 0.0 9.0 8.0\n1105.0 70.0 1.0 69.0 60.0\n"
        "1106.0 5.0 4.0 1.0 1.0\n")
    (tmp_path / "reporting.txt").write_text(
        "1099.5 7 1000\n1104.5 7 1000\n1105.5 8 525288\n1106.5 8 525288\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert collapse_parts.main(["collapse_parts", str(tmp_path)]) == 0
    md = out.getvalue()
    for row in ("| control | 30 | 1 | 1 | 3.5 | 3.0 | 4.0 |",
                "| held-redo (run 1), fill and child | 20 | 1 | 1 | 9.0 | 8.0 | 9.0 |",
                "| held-redo (run 1), after the child | 40 | 2 | 1 | 69.0 | 60.0 | 70.0 |",
                "| held-redo (run 1), after the child | 512 |",
                "| held-redo (run 1), after the child | 5.0 | 60.0 | +0.5 s, 512 |"):
        assert row in md, md
