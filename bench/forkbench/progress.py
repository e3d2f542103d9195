"""Progress lines and the small formatting helpers every phase uses."""
import time

from . import runplan


START = time.time()


class Progress:
    """One line per phase of a run, with the time left (runplan.Estimate)."""

    def __init__(self, runs, args):
        self.estimate = runplan.Estimate(runs, args)
        self.repeat = args.repeat
        self.run = None
        self.run_started = time.time()

    def start(self, run):
        self.run, self.run_started = run, time.time()

    def finish(self, run):
        self.estimate.finished(run, time.time() - self.run_started)

    def say(self, phase):
        r = self.run
        left = self.estimate.left(r, time.time() - self.run_started)
        print("[bench %6.1fs, ~%s left] rep %d/%d %6s GB  %-12s %s"
              % (time.time() - START, runplan.fmt_duration(left), r.rep, self.repeat,
                 fmt_size(r.size), r.variant, phase), flush=True)


def note(text):
    print("bench: " + text, flush=True)


def fmt_size(size):
    return "%g" % size


def fmt_secs(seconds):
    return "%d" % seconds if seconds >= 10 else "%.1f" % seconds

