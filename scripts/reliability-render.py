#!/usr/bin/env python3
"""Fills scripts/reliability-template.md with the figures of one run.

{{run}}              when, where and what kind of run
{{figures SUITE}}    the figures of SUITE's tests that passed (bullets)
{{figures *}}        figures of suites no other placeholder names
{{skipped}}          tests skipped in this run, with their reason
{{attacks}}          the attacks of issue 24 by route, with the tests that hold
                     them and their counts (--attacks: scripts/reliability-attacks.md)
A figure of a test that did not pass is left out, and said so. The attacks'
counts are the list's, not a run's: they are counts of attacks and tests.
"""
import argparse, datetime, os, platform, re, sys

parser = argparse.ArgumentParser()
parser.add_argument("--template", required=True)
parser.add_argument("--figures", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--mode", required=True)
parser.add_argument("--swift", default="")
parser.add_argument("--sqlite", default="")
parser.add_argument("--attacks", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "reliability-attacks.md"))
args = parser.parse_args()

template = open(args.template, encoding="utf-8").read()
output = open(args.output, encoding="utf-8", errors="replace").read()

passed, failed, skipped = set(), set(), []
for line in output.splitlines():
    m = re.search(r"Test (\S+\(.*?\))(?: with \d+ test cases?)? passed after", line)
    if m: passed.add(m.group(1)); continue
    m = re.search(r"Test (\S+\(.*?\))(?: with \d+ test cases?)? failed after", line)
    if m: failed.add(m.group(1)); continue
    m = re.search(r"Test (\S+\(.*?\)) skipped(?::\s*\"?(.*?)\"?)?\s*$", line)
    if m: skipped.append((m.group(1), m.group(2) or "no reason given"))
summary = re.findall(r"Test run with (\d+) tests? .*?(passed|failed)", output)

figures = {}   # suite -> [(function, line)]
dropped = []
for row in open(args.figures, encoding="utf-8", errors="replace"):
    parts = row.rstrip("\n").split("\t", 2)
    if len(parts) != 3: continue
    suite, function, line = parts
    if suite != "fuzz" and (function not in passed or function in failed):
        dropped.append((suite, function)); continue
    figures.setdefault(suite, []).append((function, line))
# Tests finish in any order; by test name, a new run's diff shows only what changed
# (libFuzzer's targets keep scripts/fuzz's order).
for suite, entries in figures.items():
    if suite != "fuzz": entries.sort(key=lambda entry: entry[0])

named = set(re.findall(r"\{\{figures (\w+)\}\}", template))

def bullets(entries):
    if not entries: return "No figure from this run (its tests did not run; see \"Skipped in this run\")."
    return "\n".join(f"- {line}" for _, line in entries)

def fill(match):
    suite = match.group(1)
    if suite == "*":
        rest = [e for s, es in sorted(figures.items()) if s not in named for e in es]
        return bullets(rest) if rest else "None."
    if suite == "fuzz" and not figures.get(suite):
        return "libFuzzer did not run in this run (`./scripts/reliability --fuzz SECONDS` runs it)."
    return bullets(figures.get(suite, []))

text = re.sub(r"\{\{figures (\w+|\*)\}\}", fill, template)
total = summary[-1] if summary else ("?", "?")
run = (f"Run: {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M')} UTC, {args.mode}, debug build, "
       f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {args.swift}, SQLite {args.sqlite}; "
       f"swift test ran {total[0]} tests and {total[1]}"
       + (f"; {len(failed)} failed: {', '.join(sorted(failed))} (their figures are left out)" if failed else "")
       + ".")
text = text.replace("{{run}}", run)

def attacks():
    """The list of scripts/reliability-attacks.md as an overview of counts and
    one table per route. Lines: "## ROUTE", then "- ITEM | ATTACK | TESTS | ENGINES"."""
    routes = []   # (route, [(item, attack, tests, engines)])
    source = open(args.attacks, encoding="utf-8").read()
    source = re.sub(r"(?s)<!--.*?-->", "", source)
    for line in source.splitlines():
        if line.startswith("## "):
            routes.append((line[3:].strip(), []))
        elif line.startswith("- ") and routes:
            parts = [part.strip() for part in line[2:].split(" | ")]
            if len(parts) != 4: sys.exit(f"{args.attacks}: not ITEM | ATTACK | TESTS | ENGINES: {line}")
            item, attack, tests, engines = parts
            names = [] if tests.startswith("no test") else [name.strip() for name in tests.split(",")]
            routes[-1][1].append((item, attack, tests, names, engines))
    def number(item): return int(re.match(r"\d+", item).group(0))
    all_items = {number(e[0]) for _, entries in routes for e in entries}
    all_tests = {name for _, entries in routes for e in entries for name in e[3]}
    entries = [e for _, es in routes for e in es]
    known = [e[0] for e in entries if "known issue" in e[4]]
    untested = [e[0] for e in entries if not e[3]]
    lines = ["| route | items | attacks | tests |", "| --- | --- | --- | --- |"]
    for route, es in routes:
        lines.append(f"| {route} | {', '.join(e[0] for e in es)} | {len(es)} | {len({n for e in es for n in e[3]})} |")
    lines.append(f"| **every route** | {len(all_items)} items | **{len(entries)}** | **{len(all_tests)}** |")
    lines.append("")
    lines.append(f"{len(entries)} attacks, the {len(all_items)} items of the issue and their parts, held by {len(all_tests)} tests"
                 + (f"; not held on PostgreSQL yet (known issues in their tests): {', '.join(known)}" if known else "")
                 + (f"; without a test: {', '.join(untested)}" if untested else "") + ".")
    for route, es in routes:
        tests = {n for e in es for n in e[3]}
        lines += ["", f"### {route} ({len(es)} attack{'s' if len(es) != 1 else ''}, {len(tests)} test{'s' if len(tests) != 1 else ''})", "",
                  "| item | the attack | held by | engines |", "| --- | --- | --- | --- |"]
        for item, attack, tests_text, names, engines in es:
            held = ", ".join(f"`{n}`" for n in names) if names else tests_text
            lines.append(f"| {item} | {attack} | {held} | {engines} |")
    return "\n".join(lines)

if "{{attacks}}" in text: text = text.replace("{{attacks}}", attacks())
text = text.replace("{{skipped}}", "\n".join(f"- `{name}`: {reason}" for name, reason in skipped) or "Nothing was skipped.")
sys.stdout.write(text)
