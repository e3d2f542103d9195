#!/usr/bin/env python3
"""check_scrape.py -- does redis_exporter's scrape carry INFO fork, right?

    check_scrape.py METRICS INFO_FORK_BEFORE INFO_FORK_AFTER
                    [--scenario INFO_STATS THP_ENABLED] [--want KEY=VALUE]...
                    [--names OUT]

METRICS is the exporter's /metrics page, scraped with
contrib/monitoring/afork-fork-info.lua; the INFO files were read from the
server just before and just after the scrape; THP_ENABLED is the mode in
/sys/kernel/mm/transparent_hugepage/enabled. Each field of INFO fork must
be a redis_script_values{key=...} series with INFO's value (numbers as they
are; a word field as its states: "<field>_<state>" 1, the others 0), and no
series may be left over. With --scenario, the fork time, child-ready, COW
and THP fields must also hold what the scenario of tests/exporter/run.sh
produced; --want: a key must have that value. Prints "[ok]: ..." or
"[err]: ..." lines and exits 1 on any error. --names writes the metric
names of the scrape (with the key or event_name label that tells series
apart) for contrib/monitoring/metrics.txt.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "system"))
import checklib  # noqa: E402
from checklib import err, ok  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# Labels that name what a series is (the rest: where it comes from).
IDENTITY = ("key", "event_name")


def parse_metrics(path):
    """[(name, {label: value}, float value)] of a Prometheus text page."""
    out = []
    with open(path) as f:
        for line in f:
            m = SAMPLE.match(line)
            if m and not line.startswith("#"):
                out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")),
                            float(m.group(3))))
    return out


def parse_info(path):
    fields = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v
    return fields


def split_fields(info):
    """({numeric field: value}, {word field: its state key}) of INFO fork."""
    nums, words = {}, {}
    for k, v in info.items():
        try:
            nums[k] = float(v)
        except ValueError:
            words[k] = k + "_" + re.sub(r"[^0-9A-Za-z]", "_", v.split(":")[0])
    return nums, words


def check_values(script, before, after):
    """Every INFO fork field is exported with INFO's value (a word field: its
    state 1, its other states 0); no series is left over."""
    (nb, wb), (na, wa) = split_fields(before), split_fields(after)
    start = checklib.errors
    for k in sorted(set(nb) | set(na)):
        if k not in script:
            err("field %s exported" % k, 'no redis_script_values{key="%s"}' % k)
        elif script[k] not in (nb.get(k), na.get(k)):
            err("field %s exported" % k, "scraped %r, INFO fork said %r then %r"
                % (script[k], nb.get(k), na.get(k)))
    for k in sorted(set(wb) | set(wa)):
        now = {wb.get(k), wa.get(k)} - {None}
        states = {x: v for x, v in script.items()
                  if x.startswith(k + "_") and x not in nb and x not in na}
        if not any(states.get(x) == 1 for x in now):
            err("field %s exported" % k, "INFO fork said %s, scraped %r" % (sorted(now), states))
        ones = [x for x, v in states.items() if v != 0 and x not in now]
        if ones:
            err("field %s exported" % k, "other states not 0: %s" % ones)
    extra = sorted(x for x in script if x not in nb and x not in na
                   and not any(x.startswith(w + "_") for w in set(wb) | set(wa)))
    if extra:
        err("no series but INFO fork's", "extra keys %s" % extra)
    if checklib.errors == start:
        ok("all %d INFO fork fields are exported with INFO's values (%d words as states)"
           % (len(na) + len(wa), len(wa)))


def check_scenario(script, metrics, stats, thp):
    """The fields the dashboard and the alerts use hold the scenario's values."""
    def need(name, cond, got):
        if cond:
            ok("%s: %r" % (name, got))
        else:
            err(name, "got %r" % (got,))

    def key(k):
        return script.get(k, float("nan"))

    need("fork time: max_fork_usec > 0, p50 <= p99 <= p999 <= max",
         key("max_fork_usec") > 0 and key("fork_p50_usec") <= key("fork_p99_usec")
         <= key("fork_p999_usec") <= key("max_fork_usec"), key("max_fork_usec"))
    need("fork rate latest_fork_rate_gb_per_sec > 0", key("latest_fork_rate_gb_per_sec") > 0,
         key("latest_fork_rate_gb_per_sec"))
    upstream = [v for n, _, v in metrics if n == "redis_latest_fork_seconds"]
    want = int(stats["latest_fork_usec"]) / 1e6
    need("upstream's redis_latest_fork_seconds = latest_fork_usec / 1e6 (%g)" % want,
         upstream == [want], upstream)
    need("child-ready time latest_fork_child_ready_usec >= 30000 (the 30 ms delay)",
         key("latest_fork_child_ready_usec") >= 30000, key("latest_fork_child_ready_usec"))
    need("latest_fork_async_observed = 1 (ready long after fork() returned)",
         key("latest_fork_async_observed") == 1, key("latest_fork_async_observed"))
    need("COW stall latest_fork_cow_max_eventloop_usec >= 20000 (the 20 ms sleep)",
         key("latest_fork_cow_max_eventloop_usec") >= 20000,
         key("latest_fork_cow_max_eventloop_usec"))
    need("COW faults latest_fork_cow_minor_faults > 0", key("latest_fork_cow_minor_faults") > 0,
         key("latest_fork_cow_minor_faults"))
    need("page tables page_table_bytes > 0", key("page_table_bytes") > 0, key("page_table_bytes"))
    need("THP mode thp_enabled_%s = 1 (as /sys says), the other modes 0" % thp,
         key("thp_enabled_" + thp) == 1 and sum(v for k, v in script.items()
                                                 if k.startswith("thp_enabled_")) == 1,
         {k: v for k, v in script.items() if k.startswith("thp_enabled_")})
    # fork-thp auto, the default: off where the machine lacks what it
    # needs, else waiting (the test's dataset is far from its threshold).
    need("fork-thp state fork_thp_heap_off or _waiting = 1, on and refused 0",
         key("fork_thp_heap_off") + key("fork_thp_heap_waiting") == 1
         and key("fork_thp_heap_on") == 0 and key("fork_thp_heap_refused") == 0,
         {k: v for k, v in script.items() if k.startswith("fork_thp_heap_")})
    for k in ("thp_anon_huge_pages_bytes", "thp_process_disabled", "fork_quiet_window_timeouts"):
        need("%s exported" % k, k in script, key(k))


def names(metrics):
    """Sorted metric names, with the identity label of labelled series."""
    out = set()
    for name, labels, _ in metrics:
        if not name.startswith("redis_"):
            continue
        ident = ",".join('%s="%s"' % (l, labels[l]) for l in IDENTITY if l in labels)
        out.add(name + ("{%s}" % ident if ident else ""))
    return sorted(out)


def main():
    p = argparse.ArgumentParser()
    for a in ("metrics", "before", "after"):
        p.add_argument(a)
    p.add_argument("--scenario", nargs=2, metavar=("INFO_STATS", "THP_ENABLED"))
    p.add_argument("--want", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--names")
    a = p.parse_args()
    metrics = parse_metrics(a.metrics)
    script = {l["key"]: v for n, l, v in metrics if n == "redis_script_values"}
    result = [v for n, _, v in metrics if n == "redis_script_result"]
    if result != [1.0]:
        err("the script ran", "redis_script_result %r (1: values, 2: none, 0: error)" % result)
    else:
        ok("the script ran (redis_script_result 1)")
    check_values(script, parse_info(a.before), parse_info(a.after))
    if a.scenario:
        check_scenario(script, metrics, parse_info(a.scenario[0]), a.scenario[1])
    for want in a.want:
        k, v = want.split("=")
        if script.get(k) == float(v):
            ok("%s = %s" % (k, v))
        else:
            err("%s = %s" % (k, v), "scraped %r" % script.get(k))
    if a.names and checklib.errors == 0:
        with open(a.names, "w") as f:
            f.write("# Metric names of a redis_exporter scrape of redis-afork with\n"
                    "# contrib/monitoring/afork-fork-info.lua, written by make test-exporter\n"
                    "# (tests/exporter/check_scrape.py); tests/system/monitoring.sh checks the\n"
                    "# dashboard and the alert rules against it. Do not edit.\n")
            f.write("\n".join(names(metrics)) + "\n")
        ok("metric names written to %s" % a.names)
    return 1 if checklib.errors else 0


if __name__ == "__main__":
    sys.exit(main())
