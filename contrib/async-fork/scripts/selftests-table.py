#!/usr/bin/env python3
"""selftests-table.py -- the comparison of make kernel-selftests: the
kernel's mm selftests on the stock kernel and on the patched kernel with
vm.async_fork=2, per program and per case.

    selftests-table.py RESULTS [--steps a,b,...]

RESULTS holds selftests-stock/ and selftests-patched/ (boot.sh's output:
console.txt, results.tsv, problems.txt). Each program's output is the
console between "AFORK-START STEP" and "AFORK-EXIT STEP" without the
kernel's timestamped lines; its cases are read in the three forms these
programs print:
  - KTAP (kselftest.h and kselftest_harness.h): "ok N name",
    "not ok N name", "ok N # SKIP name" / "ok N name # SKIP reason",
    "ok N # XFAIL ..." (counted as a pass);
  - uffd-unit-tests: "Testing NAME... done | skipped [reason: ...] |
    failed [reason: ...]" (a "Testing" line without a verdict: the program
    ended inside it, a failure);
  - khugepaged: "message... OK" coloured green (pass), red (fail), yellow
    (skip), under "Run test: NAME (context:memory)".
Programs that print no cases (gup_test, ksm_tests, uffd-stress...) have
their exit status only.

Prints the table (program: verdict and pass/fail/skip counts per kernel,
and on the patched kernel the asynchronous forks the program made and the
tables they left to children, from its AFORK-MM-SESSIONS line: a program
whose forks were all synchronous, because it pinned first say, proves
little about deferral), then per program the failing and skipped cases, and writes table.txt
(the same) and cases.tsv (step, case, stock, patched) into RESULTS.

Exit status 1 when the patched kernel fails what the stock kernel does not:
a program (FAIL against PASS or SKIP), a case (fail against pass, skip or
absent while the stock program passed), or the boot itself (a kernel splat
line, panic, hang or missing result only on the patched kernel; a splat
line counts against the program that was running, or had run last, when
the kernel printed it); else 0.
The programs with such a failure are listed in RESULTS/regressed-steps.txt,
every such failure, a line each, in RESULTS/problems.txt (empty when none:
what make kernel-test prints last when the comparison fails).
When RESULTS also holds selftests-stock-repeat/ and
selftests-patched-repeat/ (those programs run again, as STEP@N), a program
that failed on the stock kernel too, in any run, is reported as flaky on
both and no longer counts against the series (a splat line: when the
stock kernel prints it during a run of that program). One that failed on
the patched kernel only, even once, counts: a failure the stock kernel
never shows may be the series' own, however rarely it comes (the
repeats tell how often, in the table and RESULTS/flaky.txt).
"""

import argparse
import os
import re
import sys

# The two sides of the comparison: the boot each reads (selftests-BOOT/,
# set by --stock and --patched) and its label.
DIRS = {"stock": "stock", "patched": "patched"}
KERNELS = ("stock", "patched")


def label(k):
    return DIRS[k] + (" =2" if k == "patched" else "")


KERNEL_LINE = re.compile(r"^\[ *\d+\.\d+\] ")
SESSIONS = re.compile(r"AFORK-MM-SESSIONS (\S+) (\d+) (\d+)")
KTAP = re.compile(r"^(not ok|ok) (\d+)(?: (.*))?$")
UFFD = re.compile(r"^Testing (.*?)\.\.\. ?(.*)$")
KHUGE_RUN = re.compile(r"^Run test: (\S+) \((.*)\)$")
KHUGE_VERDICT = re.compile(r"^(.*?) ?\x1b\[(3[123])m(.*?)\x1b\[0m\s*$")


def program_output(lines, step):
    """The console lines of STEP (None when it never started)."""
    out, inside = [], False
    for line in lines:
        if line.endswith("AFORK-START " + step) or ("AFORK-START " + step + " ") in line:
            inside, out = True, []
            continue
        if inside and re.search(r"AFORK-EXIT %s \d+$" % re.escape(step), line):
            return out
        if inside and not KERNEL_LINE.match(line) and not line.startswith("AFORK-"):
            out.append(line)
    return out if inside else None


def add(cases, name, status, why=""):
    base, n = name.strip() or "(unnamed)", 2
    name = base
    while name in cases:
        name = "%s #%d" % (base, n)
        n += 1
    cases[name] = (status, why)


def parse_cases(step, out):
    cases = {}
    if step == "mm-uffd-unit-tests":
        for line in out:
            m = UFFD.match(line)
            if not m:
                continue
            rest = m.group(2).strip()
            why = re.match(r"^(?:skipped|failed) \[reason: (.*)\]$", rest)
            if rest == "done":
                add(cases, m.group(1), "pass")
            elif rest.startswith("skipped"):
                add(cases, m.group(1), "skip", why.group(1) if why else rest)
            elif rest.startswith("failed"):
                add(cases, m.group(1), "fail", why.group(1) if why else rest)
            else:
                add(cases, m.group(1), "fail", rest or "no verdict: the program ended here")
        return cases
    if step.startswith("mm-khugepaged"):
        header = ""
        for line in out:
            m = KHUGE_RUN.match(line)
            if m:
                header = "%s (%s)" % m.groups()
                continue
            m = KHUGE_VERDICT.match(line)
            if not m:
                continue
            text = m.group(1)
            if "Construct" in text:
                text = text[text.rindex("Construct"):]
            text = re.sub(r" *\d+/\d+", "", text).rstrip(". ")
            status = {"32": "pass", "31": "fail", "33": "skip"}[m.group(2)]
            add(cases, "%s: %s" % (header, text) if header else text, status,
                "" if status == "pass" else m.group(3))
        return cases
    for line in out:
        m = KTAP.match(line)
        if not m:
            continue
        desc = m.group(3) or ""
        status = "pass" if m.group(1) == "ok" else "fail"
        why = ""
        d = re.search(r"#\s*(SKIP|XFAIL|error)\b\s*(.*)$", desc, re.I)
        if d:
            kind = d.group(1).upper()
            name = desc[:d.start()].strip()
            why = d.group(2).strip()
            if not name:
                name, why = why, ""
            if kind == "SKIP":
                status = "skip"
            elif kind == "XFAIL":
                status = "pass"
            else:
                status = "fail"
            desc = name
        add(cases, desc, status, why)
    return cases


def read_results(path):
    res = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2:
                    res[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "-",
                                     parts[3] if len(parts) > 3 else "")
    except OSError:
        pass
    return res


def boot_problems(path):
    """Problems of the boot itself (not a program's FAIL line)."""
    probs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if re.match(r"^mm-\S+: FAIL ", line) or not line.strip():
                    continue
                probs.append(line)
    except OSError:
        probs.append("no problems.txt: the boot did not run")
    return probs


# A timestamped kernel message of splat.ere (the file boot.sh and the
# guest's init read too).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "splat.ere")) as _f:
    SPLAT = re.compile(r"\[ *\d+\.\d+\] .*(" + _f.read().strip() + ")")


def splats(results, kernel, repeat=False):
    """The console's kernel splat lines, without what varies between boots
    (time, CPU, PID, comm, addresses), each once per step: (line, step),
    the step (STEP or STEP@N) that was running or had run last when the
    kernel printed it, None before the first."""
    seen, step = [], None
    name = "selftests-" + DIRS[kernel] + ("-repeat" if repeat else "")
    try:
        with open(os.path.join(results, name, "console.txt"), errors="replace") as f:
            for line in f:
                m = re.search(r"AFORK-START (\S+)", line)
                if m and not KERNEL_LINE.match(line):
                    step = m.group(1)
                # gup_test's dump_pages() case dumps pages on purpose.
                if not SPLAT.search(line) or "gup_test: dump_pages() test" in line:
                    continue
                line = re.sub(r"^.*?\[ *\d+\.\d+\] ", "", line.rstrip("\n"))
                line = re.sub(r"CPU: \d+ (UID: \d+ )?PID: \d+( Comm: \S+)?", "CPU: * PID: *", line)
                line = re.sub(r"0x[0-9a-f]+(/0x[0-9a-f]+)?|\b[0-9a-f]{8,}\b", "*", line)
                line = re.sub(r"pid:? \d+|\d+ seconds", "*", line)
                if (line, step) not in seen:
                    seen.append((line, step))
    except OSError:
        pass
    return seen


def problem_kinds(probs):
    kinds = set()
    for p in probs:
        for k in ("PANIC", "HANG", "KERNEL SPLAT", "dmesg holds a kernel splat",
                  "stopped before the end", "never started", "QEMU failed",
                  "missing result line", "guest error"):
            if k in p:
                kinds.add(k)
    kinds.discard("KERNEL SPLAT")
    kinds.discard("dmesg holds a kernel splat")
    return kinds


def verdict(res):
    v, secs, why = res
    if v == "PASS" and why.startswith("skipped"):
        return "SKIP", secs
    return v, secs


def load(results, kernel, steps):
    d = os.path.join(results, "selftests-" + DIRS[kernel])
    con = os.path.join(d, "console.txt")
    lines = []
    if os.path.exists(con):
        with open(con, errors="replace") as f:
            lines = f.read().split("\n")
    res = read_results(os.path.join(d, "results.tsv"))
    sessions = {}
    for line in lines:
        m = SESSIONS.search(line)
        if m:
            sessions[m.group(1)] = "%s/%s" % (m.group(2), m.group(3))
    progs = {}
    for step in steps:
        out = program_output(lines, step)
        r = res.get(step, ("FAIL", "-", "missing result line"))
        v, secs = verdict(r)
        progs[step] = {"verdict": v, "secs": secs, "why": r[2],
                       "cases": parse_cases(step, out or []), "ran": out is not None,
                       "sessions": sessions.get(step, "-")}
    return {"progs": progs, "problems": boot_problems(os.path.join(d, "problems.txt")),
            "present": os.path.exists(con)}


def repeat_counts(results, steps, reg_splats):
    """For each step: (failed runs, runs) per kernel over the first boot
    and the repeat boot (selftests-KERNEL-repeat, steps named STEP@N); a
    run fails when the program does, or when the kernel printed, while it
    ran, a splat line that only the first patched boot had
    (reg_splats: step -> lines)."""
    out = {}
    for k in KERNELS:
        rep = os.path.join(results, "selftests-%s-repeat" % DIRS[k])
        if not os.path.isdir(rep):
            return {}
        first = read_results(os.path.join(results, "selftests-" + DIRS[k], "results.tsv"))
        again = read_results(os.path.join(rep, "results.tsv"))
        printed = set((x, st) for x, st in splats(results, k) + splats(results, k, repeat=True) if st)
        for step in steps:
            runs = [(name, v) for name, v in list(first.items()) + list(again.items())
                    if name == step or name.startswith(step + "@")]
            failed = sum(1 for name, v in runs if v[0] != "PASS" or
                         any((x, name) in printed for x in reg_splats.get(step, ())))
            out.setdefault(step, {})[k] = (failed, len(runs))
    return out


def counts(cases):
    c = {"pass": 0, "fail": 0, "skip": 0}
    for s, _ in cases.values():
        c[s] += 1
    return c


def cell(p):
    c = counts(p["cases"])
    n = sum(c.values())
    cs = "%d/%d/%d" % (c["pass"], c["fail"], c["skip"]) if n else "-"
    return "%-4s %-11s %5s" % (p["verdict"], cs, p["secs"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--steps", required=True)
    ap.add_argument("--patched", default="patched",
                    help="the boot compared with stock (patched or kasan)")
    ap.add_argument("--stock", default="stock",
                    help="the reference boot (stock, or stock-kasan)")
    a = ap.parse_args()
    DIRS["stock"], DIRS["patched"] = a.stock, a.patched
    steps = [s for s in a.steps.split(",") if s]
    data = {k: load(a.results, k, steps) for k in KERNELS}
    lines, regressions, tsv = [], [], []
    w = max(len(s) for s in steps) + 2
    lines.append("mm selftests (tools/testing/selftests/mm of the same source), boot %s vs boot %s (vm.async_fork=2)"
                 % (DIRS["stock"], DIRS["patched"]))
    lines.append("verdict, cases pass/fail/skip (- = the program prints no cases), seconds;")
    lines.append("async forks: the patched kernel's sessions/tables deferred during the program")
    lines.append("")
    lines.append("%-*s %-23s %-23s %-12s %s" % (w, "program", label("stock"), label("patched"),
                                            "async forks", "patched vs stock"))
    for step in steps:
        s, p = data["stock"]["progs"][step], data["patched"]["progs"][step]
        note = "same"
        if p["verdict"] == "FAIL" and s["verdict"] != "FAIL":
            note = "REGRESSION: program fails only on patched"
            regressions.append("%s: the program fails on patched (%s), %s on stock" % (step, p["why"], s["verdict"]))
        new_fail = [c for c, (st, _) in p["cases"].items()
                    if st == "fail" and s["cases"].get(c, ("absent", ""))[0] != "fail"
                    and (c in s["cases"] or s["verdict"] != "FAIL")]
        for c in new_fail:
            regressions.append("%s: case '%s' fails on patched (%s), %s on stock" % (
                step, c, p["cases"][c][1] or "-", s["cases"].get(c, ("absent", ""))[0]))
        if new_fail and not note.startswith("REGRESSION"):
            note = "REGRESSION: %d case(s) fail only on patched" % len(new_fail)
        elif note == "same" and (s["verdict"] != p["verdict"] or counts(s["cases"]) != counts(p["cases"])):
            note = "differs (no new failure)"
        lines.append("%-*s %-23s %-23s %-12s %s" % (w, step, cell(s), cell(p), p["sessions"], note))
        for c in sorted(set(s["cases"]) | set(p["cases"])):
            tsv.append("%s\t%s\t%s\t%s" % (step, c, s["cases"].get(c, ("absent", ""))[0],
                                           p["cases"].get(c, ("absent", ""))[0]))
    lines.append("")
    lines.append("failing and skipped cases (%s / %s):" % (label("stock"), label("patched")))
    for step in steps:
        s, p = data["stock"]["progs"][step], data["patched"]["progs"][step]
        notes = []
        for k in KERNELS:
            pr = data[k]["progs"][step]
            if pr["verdict"] != "PASS":
                notes.append("  %s: program %s%s" % (label(k), pr["verdict"], (": " + pr["why"]) if pr["why"] else ""))
        for status in ("fail", "skip"):
            names = sorted(set(c for c, (st, _) in s["cases"].items() if st == status) |
                           set(c for c, (st, _) in p["cases"].items() if st == status))
            shown = {}
            for c in names:
                ss = s["cases"].get(c, ("absent", ""))
                ps = p["cases"].get(c, ("absent", ""))
                why = ps[1] if ps[0] == status else ss[1]
                # Cases of one name (NAME, NAME #2...) alike on both: one line.
                key = (re.sub(r" #\d+$", "", c), ss[0], ps[0], why)
                if key in shown:
                    shown[key] += 1
                    continue
                shown[key] = 1
            for (c, st, pt, why), n in shown.items():
                notes.append("  %-5s %-7s / %-7s %s%s%s" % (status, st, pt, c, " (x%d)" % n if n > 1 else "",
                                                          (" -- " + why) if why else ""))
        if notes:
            lines.append(step + ":")
            lines.extend(notes)
    lines.append("")
    for k in KERNELS:
        probs = data[k]["problems"]
        lines.append("boot %s: %s" % (label(k), "clean (no splat, panic or hang)" if not probs else "PROBLEMS:"))
        lines.extend("  " + x for x in probs[:12])
    # Splats are compared line by line (gup_test -ct dumps pages on purpose,
    # on both kernels); the other problems by kind.
    sk, pk = problem_kinds(data["stock"]["problems"]), problem_kinds(data["patched"]["problems"])
    for kind in sorted(pk - sk):
        regressions.append("the patched boot shows '%s', the stock boot does not" % kind)
    ss = set(x for x, _ in splats(a.results, "stock"))
    ps = splats(a.results, "patched")
    both = list(dict.fromkeys(x for x, _ in ps if x in ss))
    lines.append("kernel splat lines (same on both kernels): %d%s" % (
        len(both), "".join("\n  " + x for x in both)[:2000]))
    reg_splats = {}
    for x, st in ps:
        if x in ss:
            continue
        lines.append("  only on patched%s: %s" % (" (during %s)" % st if st else "", x))
        if st:
            # Attributed to its program, which then runs again on both.
            reg_splats.setdefault(st, []).append(x)
            regressions.append("%s: kernel message only on the patched kernel: %s" % (st, x))
        else:
            regressions.append("kernel message only on the patched kernel: " + x)
    reg_steps = [s for s in steps if any(r.startswith(s + ":") for r in regressions)]
    repeats = repeat_counts(a.results, reg_steps, reg_splats)
    flaky, dropped = [], set()
    if repeats:
        lines.append("")
        lines.append("repeats of what failed only on patched (failed runs / runs, the first run included):")
        for step in reg_steps:
            (sf, sn), (pf, pn) = repeats[step]["stock"], repeats[step]["patched"]
            once = not sf and pf == 1 and pn > 1
            lines.append("  %-*s stock %d/%d, patched %d/%d%s" % (
                w, step, sf, sn, pf, pn,
                " -> fails on stock too: not counted against the series" if sf else
                " -> failed once, not in the repeats: flaky on patched only, a regression" if once
                else " -> never on stock: a regression"))
            if once:
                flaky.extend(r for r in regressions if r.startswith(step + ":"))
            if sf:
                dropped.add(step)
                regressions = [r for r in regressions if not r.startswith(step + ":")]
        reg_steps = [s for s in reg_steps if s not in dropped]
    if flaky:
        lines.append("")
        lines.append("FLAKY on the patched kernel only (counted): failed once, not again in the repeats:")
        lines.extend("  " + r for r in flaky)
    lines.append("")
    if regressions:
        lines.append("REGRESSIONS: the patched kernel fails what the stock kernel does not:")
        lines.extend("  " + r for r in regressions)
    else:
        lines.append("no regression: the patched kernel fails only what the stock kernel fails")
    text = "\n".join(lines) + "\n"
    sys.stdout.write("\n" + text)
    with open(os.path.join(a.results, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(a.results, "cases.tsv"), "w") as f:
        f.write("step\tcase\tstock\tpatched\n" + "\n".join(tsv) + "\n")
    if not data["stock"]["present"] or not data["patched"]["present"]:
        return 2
    with open(os.path.join(a.results, "regressed-steps.txt"), "w") as f:
        f.write("".join(s + "\n" for s in reg_steps))
    with open(os.path.join(a.results, "problems.txt"), "w") as f:
        f.write("".join(r + "\n" for r in regressions))
    with open(os.path.join(a.results, "flaky.txt"), "w") as f:
        f.write("".join(r + "\n" for r in flaky))
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
