#!/usr/bin/env python3
"""monitoring_check.py -- contrib/monitoring/ against what the exporter exports.

    monitoring_check.py --names metrics.txt [--names more.txt] [--dashboard D.json]
                        [--rules R.yml] [--info-fork INFO.txt [--info-fork-kernel I.txt]
                                         [--reference docs/reference.md [--config CONFIG.txt]
                                          [--config-rows src/afork_config.h]]]
                        [--kernel-names K.txt --info-fork INFO.txt --info-fork-kernel I.txt]
                        [--promql-out RULES.yml]

--names: the metric names of a real scrape (contrib/monitoring/metrics.txt,
written by make test-exporter). Every metric a dashboard query, a dashboard
variable or an alert rule names must be there: redis_script_values with a
key="..." matcher must name a key of the scrape, key=~"..." must match one.
--dashboard: also checks Grafana's JSON model: title, uid, schemaVersion,
the variables, and each panel's id (unique), type, datasource (the
dashboard's datasource variable), grid position (inside 24 columns, no
overlap) and targets (refId unique, a query); --promql-out writes every
dashboard query as a recording rule (Grafana's variables replaced) for
`promtool check rules` to parse. --info-fork: INFO fork of the build under
test; the script keys of --names must be its fields, and all of them
(metrics.txt is stale after a rename until make test-exporter runs);
with --reference, each field (of --info-fork-kernel too, when given) must
be in the reference's INFO table ("| field | unit | meaning |"), and with
--config (the reply of CONFIG GET fork-*, one word a line) each option in
its options table ("| option | values | default | ..."); with --config-rows
(the config table's source) each hidden option there, which CONFIG GET
fork-* does not list (the deprecated and the test options), must be a row
of one of the reference's tables. --names again
(e.g. contrib/monitoring/metrics-async-fork.txt): more series the
dashboard and rules may name. --kernel-names FILE --info-fork PLAIN
--info-fork-kernel WITH: FILE's keys are exactly the fields that INFO fork
WITH has and PLAIN has not (the fields of contrib/async-fork's counters).
Prints "[ok]: ..." or "[err]: ..." lines; exit 1 on any error.
"""
import argparse
import json
import re
import sys

import checklib
from checklib import err, ok

SELECTOR = re.compile(r'\b(redis_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?')
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
IDENTITY = ("key", "event_name")
PANEL_TYPES = {"timeseries", "stat", "state-timeline", "table", "gauge", "bargauge",
               "text", "row", "heatmap", "barchart"}
GRAFANA_VARS = {"$instance": ".*", "$__rate_interval": "5m", "$__interval": "1m",
                "$__range": "1h"}


def load_names(path):
    """{metric: {(label, value), ...}} of metrics.txt."""
    names = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$', line)
            labels = set(MATCHER.findall(m.group(2) or ""))
            names.setdefault(m.group(1), set()).update((l, v) for l, _, v in labels)
    return names


def check_expr(where, expr, names):
    """Every redis_* selector of expr names a scraped series; 0 if none."""
    found = 0
    for metric, braces in SELECTOR.findall(expr):
        found += 1
        if metric not in names:
            err(where, "metric %s is not in metrics.txt (not exported; make test-exporter)" % metric)
            continue
        for label, op, value in MATCHER.findall(braces or ""):
            if label not in IDENTITY or op not in ("=", "=~"):
                continue
            have = sorted(v for l, v in names[metric] if l == label)
            if op == "=" and value not in have:
                err(where, '%s{%s="%s"} is not in metrics.txt' % (metric, label, value))
            if op == "=~" and not any(re.fullmatch(value, v) for v in have):
                err(where, '%s{%s=~"%s"} matches nothing in metrics.txt' % (metric, label, value))
    if not found:
        err(where, "names no redis_* metric: %s" % expr)
    return found


def grafana_expr(expr):
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return expr


def check_grid(panels):
    cells = {}
    for p in panels:
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy"):
            err("panel %s gridPos" % p.get("id"), "needs integer h, w, x, y: %r" % g)
            continue
        if g["w"] <= 0 or g["h"] <= 0 or g["x"] < 0 or g["x"] + g["w"] > 24:
            err("panel %s gridPos" % p.get("id"), "outside the 24 columns: %r" % g)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    err("panel %s gridPos" % p.get("id"), "overlaps panel %s" % cells[(x, y)])
                    return
                cells[(x, y)] = p.get("id")


def check_dashboard(path, names, promql_out):
    with open(path) as f:
        d = json.load(f)
    before = checklib.errors
    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int),
                      ("panels", list), ("templating", dict), ("time", dict)):
        if not isinstance(d.get(key), kind):
            err("dashboard %s" % key, "missing or not a %s" % kind.__name__)
    if len(d.get("uid", "")) > 40:
        err("dashboard uid", "longer than 40 characters")
    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    ds_vars = [n for n, v in variables.items() if v.get("type") == "datasource"]
    if len(ds_vars) != 1 or variables[ds_vars[0]].get("query") != "prometheus":
        err("dashboard datasource variable", "want one of type datasource, query prometheus")
    ds = {"type": "prometheus", "uid": "${%s}" % (ds_vars[0] if ds_vars else "?")}
    queries = []
    for name, v in variables.items():
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if v.get("datasource") != ds:
                err("variable %s" % name, "datasource is not %r" % ds)
            check_expr("variable %s" % name, q or "", names)
    ids = set()
    panels = d.get("panels", [])
    for p in panels:
        where = "panel %s (%s)" % (p.get("id"), p.get("title"))
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            err(where, "id missing or not unique")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            err(where, "unknown panel type %r" % p.get("type"))
        if not p.get("title"):
            err(where, "no title")
        if p.get("type") in ("row", "text"):
            continue
        if p.get("datasource") != ds:
            err(where, "datasource is not %r" % ds)
        targets = p.get("targets") or []
        if not targets:
            err(where, "no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            err(where, "refIds missing or repeated: %r" % refs)
        for t in targets:
            if t.get("datasource", ds) != ds:
                err(where, "target datasource is not %r" % ds)
            expr = t.get("expr", "")
            check_expr("%s %s" % (where, t.get("refId")), expr, names)
            queries.append((p.get("id"), t.get("refId"), grafana_expr(expr)))
    check_grid(panels)
    if checklib.errors == before:
        ok("dashboard %s: JSON model of %d panels, every query names exported metrics"
           % (path, len(panels)))
    if promql_out:
        with open(promql_out, "w") as f:
            f.write("groups:\n  - name: dashboard-queries\n    rules:\n")
            for pid, ref, expr in queries:
                f.write("      - record: dashboard:panel%s_%s\n        expr: %s\n"
                        % (pid, ref, json.dumps(expr)))


def rule_exprs(path):
    """(name, expr) of each rule of a Prometheus rules file (a small
    reader for its layout: '- alert: X' or '- record: X', then 'expr: |'
    with an indented block, or 'expr: <one line>')."""
    out, name, lines, i = [], None, open(path).read().split("\n"), 0
    while i < len(lines):
        m = re.match(r'\s*-?\s*(alert|record):\s*(\S+)', lines[i])
        if m:
            name = m.group(2)
        m = re.match(r'(\s*)expr:\s*(.*)$', lines[i])
        if m:
            if m.group(2).strip() in ("|", ">", "|-", ">-"):
                block, indent = [], len(m.group(1))
                i += 1
                while i < len(lines) and (not lines[i].strip()
                                          or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i])
                    i += 1
                out.append((name, "\n".join(block)))
                continue
            out.append((name, m.group(2)))
        i += 1
    return out


def check_rules(path, names):
    before = checklib.errors
    exprs = rule_exprs(path)
    if not exprs:
        err("rules %s" % path, "no rule found")
    for name, expr in exprs:
        check_expr("rule %s" % name, expr, names)
    if checklib.errors == before:
        ok("rules %s: %d rules, every expression names exported metrics" % (path, len(exprs)))


def check_info(path, names):
    """metrics.txt's script keys are this build's INFO fork fields, all of them."""
    fields = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k] = v
    keys = {v for l, v in names.get("redis_script_values", set()) if l == "key"}
    before = checklib.errors
    for k, v in sorted(fields.items()):
        try:
            float(v)
            word = False
        except ValueError:
            word = True
        if not word and k not in keys:
            err("metrics.txt is current", "INFO fork field %s is not a scraped key" % k)
        if word and not any(x.startswith(k + "_") for x in keys):
            err("metrics.txt is current", "INFO fork field %s (a word) has no %s_<word> key" % (k, k))
    for key in sorted(keys):
        if key not in fields and not any(key.startswith(k + "_") and not _num(fields[k])
                                         for k in fields):
            err("metrics.txt is current", "scraped key %s is no INFO fork field of this build" % key)
    if checklib.errors == before:
        ok("metrics.txt holds the %d INFO fork fields of this build, and no other" % len(fields))


def doc_table(text, header):
    """The markdown table of text that starts with header, '' if none."""
    start = text.find(header)
    return text[start:text.find("\n\n", start)] if start >= 0 else ""


def check_reference(path, info_paths, config_path=None):
    """Every INFO fork field of info_paths is in the reference's INFO table
    (| field | unit | meaning |); every option of config_path (CONFIG GET
    reply: name, value, name, value...) in its options table."""
    text = open(path).read()
    table = doc_table(text, "| field | unit | meaning |")
    documented = set(re.findall(r"`([a-z0-9_]+)`", table))
    fields = []
    for info_path in info_paths:
        for f in sorted(info_fields(info_path)):
            if f not in fields:
                fields.append(f)
    missing = [f for f in fields if f not in documented]
    if not table:
        err("the reference's INFO table", "no '| field | unit | meaning |' table in %s" % path)
    elif missing:
        err("the reference's INFO table", "%s does not document %s" % (path, missing))
    else:
        ok("%s's INFO table documents the %d INFO fork fields" % (path, len(fields)))
    if not config_path:
        return
    words = [l.strip() for l in open(config_path).read().split("\n") if l.strip()]
    options = words[0::2]
    table = doc_table(text, "| option | values | default |")
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M))
    missing = [o for o in options if o not in documented]
    if not options:
        err("the reference's options table", "CONFIG GET gave no option (%s)" % config_path)
    elif not table:
        err("the reference's options table", "no '| option | values | default |' table in %s" % path)
    elif missing:
        err("the reference's options table", "%s does not document %s" % (path, missing))
    else:
        ok("%s's options table documents the %d fork-* options" % (path, len(options)))


def check_config_rows(path, rows_path):
    """Every HIDDEN_CONFIG row of rows_path (afork_config.h) names an option
    that is a row ("| `option` |") of one of the reference's tables."""
    text = open(path).read()
    rows = re.findall(r'create\w+Config\("(fork-[a-z0-9-]+)",[^,]*,([^,]*)', open(rows_path).read())
    hidden = [name for name, flags in rows if "HIDDEN_CONFIG" in flags]
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, re.M))
    missing = [o for o in hidden if o not in documented]
    if not rows:
        err("the reference's hidden options", "no config rows in %s" % rows_path)
    elif missing:
        err("the reference's hidden options", "%s does not document %s" % (path, missing))
    else:
        ok("%s documents the %d hidden fork-* options (for tests and the bench)" % (path, len(hidden)))


def info_fields(path):
    """The field names of an INFO text."""
    return {l.split(":", 1)[0].strip() for l in open(path).read().split("\n")
            if ":" in l and not l.startswith("#")}


def check_kernel_names(path, info_path, kernel_info_path):
    """metrics-async-fork.txt's keys are exactly the INFO fork fields that
    appear only with contrib/async-fork's counters (kernel_info_path: INFO
    fork with them; info_path: without)."""
    names = load_names(path)
    keys = {v for l, v in names.get("redis_script_values", set()) if l == "key"}
    only = info_fields(kernel_info_path) - info_fields(info_path)
    if not only:
        err("kernel-only fields", "INFO fork shows no field more with the counters (%s)"
            % kernel_info_path)
    elif keys != only:
        err("kernel-only fields", "%s: missing %s, not fields %s"
            % (path, sorted(only - keys), sorted(keys - only)))
    else:
        ok("%s holds the %d INFO fork fields of an Async-fork kernel's counters" % (path, len(keys)))


def _num(v):
    try:
        float(v)
        return True
    except ValueError:
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--names", required=True, action="append",
                   help="repeatable: the dashboard and rules may name any of them")
    p.add_argument("--kernel-names", help="with --info-fork and --info-fork-kernel")
    p.add_argument("--info-fork-kernel")
    p.add_argument("--dashboard")
    p.add_argument("--rules")
    p.add_argument("--info-fork")
    p.add_argument("--promql-out")
    p.add_argument("--reference", help="docs/reference.md")
    p.add_argument("--config", help="with --reference: CONFIG GET fork-* reply")
    p.add_argument("--config-rows", help="with --reference: src/afork_config.h")
    a = p.parse_args()
    names = {}
    for path in a.names:
        for metric, labels in load_names(path).items():
            names.setdefault(metric, set()).update(labels)
    if a.dashboard:
        check_dashboard(a.dashboard, names, a.promql_out)
    if a.rules:
        check_rules(a.rules, names)
    if a.info_fork and not a.kernel_names:
        # metrics.txt (the first --names) against this build's INFO fork.
        check_info(a.info_fork, load_names(a.names[0]))
    if a.kernel_names and a.info_fork and a.info_fork_kernel:
        check_kernel_names(a.kernel_names, a.info_fork, a.info_fork_kernel)
    if a.reference and a.info_fork:
        check_reference(a.reference, [a.info_fork] + ([a.info_fork_kernel] if a.info_fork_kernel else []),
                        a.config)
    if a.reference and a.config_rows:
        check_config_rows(a.reference, a.config_rows)
    return 1 if checklib.errors else 0


if __name__ == "__main__":
    sys.exit(main())
