#!/usr/bin/env python3
"""Fills scripts/reliability-template.md with the figures of one run.

{{run}}              when, where and what kind of run
{{figures SUITE}}    the figures of SUITE's tests that passed (bullets)
{{figures *}}        figures of suites no other placeholder names
{{skipped}}          tests skipped in this run, with their reason
A figure of a test that did not pass is left out, and said so.
"""
import argparse, datetime, os, platform, re, sys

parser = argparse.ArgumentParser()
parser.add_argument("--template", required=True)
parser.add_argument("--figures", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--mode", required=True)
parser.add_argument("--swift", default="")
parser.add_argument("--sqlite", default="")
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
text = text.replace("{{skipped}}", "\n".join(f"- `{name}`: {reason}" for name, reason in skipped) or "Nothing was skipped.")
sys.stdout.write(text)
