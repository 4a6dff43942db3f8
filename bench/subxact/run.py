#!/usr/bin/env python3
"""What the backend feels while a repair loop writes in one transaction on
PostgreSQL (bench/subxact/README.md).

    bench/subxact/run.py OPSH [--sizes 100,1000,10000,50000] [--runs 3] [--hold 5]

Starts a throwaway server (scripts/pg-server), a backend writer and a
backend reader (backend.c) that run throughout, then, for each size N and
each run, opsh's repair loop (repair.lua: N db.exec UPDATEs in one
db.transaction, each under opsh's statement savepoint) and psql's (the same
UPDATEs in one transaction, no savepoints), interleaved. Prints a Markdown
table of medians (and the spread over the runs), and writes every run's
figures to results.json in the working folder.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def sh(*args, **kwargs):
    ran = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if ran.returncode != 0:
        sys.exit(f"{args[0]} failed (exit {ran.returncode}): {ran.stderr}")
    return ran.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("opsh")
    parser.add_argument("--sizes", default="100,1000,10000,50000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=5)
    parser.add_argument("--gap", type=float, default=3, help="seconds of quiet before each run: its baseline")
    parser.add_argument("--window", type=float, default=60, help="the reader's window, in seconds")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    opsh = os.path.abspath(options.opsh)
    work = tempfile.mkdtemp(prefix="opsh-subxact-")
    server = f"/tmp/opsh-sx-{os.getpid()}"
    env = dict(os.environ, HOME=work, XDG_STATE_HOME=work + "/state", XDG_DATA_HOME=work + "/data",
               XDG_CONFIG_HOME=work + "/config")
    url = sh(f"{root}/scripts/pg-server", "start", server).strip().splitlines()[-1]
    procs = []
    try:
        backend = work + "/backend"
        sh("cc", "-O2", "-o", backend, here + "/backend.c", "-I/usr/include/postgresql", "-lpq")
        sh(opsh, "--db", url, "--create", "-e", "return 1", env=env)
        psql(url, f"""
            INSERT INTO projects VALUES ('com.example.app', 'App', 'App', '/app', 0);
            INSERT INTO schemes (id, projectbundleidentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeid, versionstring, buildnumber, status, createdat)
              SELECT format('b%s', lpad(i::text, 6, '0')), 's1', '1.0', i, 'running', i
              FROM generate_series(1, {max(sizes)}) i;""")
        psql(url, "VACUUM ANALYZE builds")
        stop = work + "/stop"
        for role, last in (("write", "backend"), ("read", str(options.window))):
            p = subprocess.Popen([backend, role, url, stop, f"{work}/{role}.log", last], stdout=subprocess.PIPE, text=True)
            if p.stdout.readline().strip() != "ready":
                sys.exit(f"the backend {role}r did not start")
            procs.append(p)
        # The reader's window fills before the first run.
        time.sleep(options.window)
        runs = []
        mark = 0
        for rep in range(options.runs):
            for index, n in enumerate(sizes):
                order = ["opsh", "psql"] if (rep + index) % 2 == 0 else ["psql", "opsh"]
                for who in order:
                    mark += 1
                    psql(url, "VACUUM builds")
                    time.sleep(options.gap)
                    before = slru(url)
                    launched = time.time()
                    status = "failed" if mark % 2 else "running"
                    if who == "opsh":
                        out = sh(opsh, "run", "--no-lock", "--db", url, here + "/repair.lua", str(n), status, str(mark),
                                 str(options.hold), env=env)
                    else:
                        out = repair_psql(url, work, n, status, mark, options.hold)
                    began, looped, held = (float(t) for t in out.split())
                    ended = time.time()
                    # The backends' counters reach pg_stat_slru at most a second late.
                    time.sleep(2.5)
                    after = slru(url)
                    written = int(psql(url, f"SELECT count(*) FROM builds WHERE enddate = {mark} AND status = '{status}'"))
                    if written != n:
                        sys.exit(f"{who} run {mark} changed {written} builds, not {n}")
                    runs.append(dict(who=who, n=n, rep=rep, launched=launched, began=began, looped=looped,
                                     held=held, ended=ended, gap=options.gap, slru_before=before, slru_after=after))
                    print(f"{who} N={n} run {rep + 1}: loop {looped - began:.1f} s, hold {held - looped:.1f} s", file=sys.stderr)
        open(stop, "w").close()
        for p in procs:
            p.wait()
        procs = []
        writes = read_log(f"{work}/write.log")
        reads = read_log(f"{work}/read.log")
        for run in runs:
            phases = {"baseline": (run["launched"] - run["gap"], run["launched"]),
                      "loop": (run["began"], run["looped"]), "hold": (run["looped"], run["held"])}
            for phase, (start, end) in phases.items():
                run[phase] = {"writer": figures(writes, start, end), "reader": figures(reads, start, end)}
        with open("results.json", "w") as f:
            json.dump(runs, f, indent=1)
        print(table(runs, sizes))
    finally:
        open(work + "/stop", "w").close()
        for p in procs:
            p.wait()
        subprocess.run([f"{root}/scripts/pg-server", "stop", server])


def psql(url, sql):
    return sh("psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql).strip()


def slru(url):
    hit, read, zeroed = psql(url, "SELECT blks_hit, blks_read, blks_zeroed FROM pg_stat_slru WHERE name = 'Subtrans'").split("|")
    return {"hit": int(hit), "read": int(read), "zeroed": int(zeroed)}


def repair_psql(url, work, n, status, mark, hold):
    """The control: the same UPDATEs by psql in one transaction, no savepoints."""
    path = f"{work}/repair-{n}.sql"
    clock = "SELECT extract(epoch FROM clock_timestamp());\n"
    with open(path, "w") as f:
        f.write("BEGIN;\nPREPARE repair(text, float8, text) AS UPDATE builds SET status = $1, enddate = $2 WHERE id = $3;\n")
        f.write(clock)
        for i in range(1, n + 1):
            f.write(f"EXECUTE repair('{status}', {mark}, 'b{i:06d}');\n")
        f.write(clock + f"\\! sleep {hold}\n" + clock + "COMMIT;\n")
    return sh("psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", url, "-f", path)


def read_log(path):
    with open(path) as f:
        return [(float(a), float(b), int(c)) for a, b, c in (line.split() for line in f)]


def figures(samples, start, end):
    inside = [s for s in samples if start <= s[0] < end]
    waits = sorted(s[1] for s in inside)
    if not waits:
        return None
    return {"count": len(waits), "per_second": len(waits) / (end - start), "median": statistics.median(waits),
            "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))], "worst": waits[-1],
            "rows": statistics.median(s[2] for s in inside)}


def table(runs, sizes):
    def ms(x):
        return f"{x * 1000:.1f}"

    def cell(values, fmt):
        values = sorted(values)
        return f"{fmt(statistics.median(values))} ({fmt(values[0])}–{fmt(values[-1])})"

    lines = ["| N | by | loop s | phase | writer median ms | writer worst ms | commits/s | reader median ms | reader worst ms | reads/s | rows read | Subtransaction hit / read (Δ) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        for who in ("opsh", "psql"):
            mine = [r for r in runs if r["n"] == n and r["who"] == who]
            for phase in ("baseline", "loop", "hold"):
                have = [r for r in mine if r[phase]["writer"] and r[phase]["reader"]]
                if not have:
                    continue
                w = [r[phase]["writer"] for r in have]
                rd = [r[phase]["reader"] for r in have]
                slru_cell = ""
                if phase == "hold":
                    hits = [r["slru_after"]["hit"] - r["slru_before"]["hit"] for r in mine]
                    reads = [r["slru_after"]["read"] - r["slru_before"]["read"] for r in mine]
                    slru_cell = f"{cell(hits, str)} / {cell(reads, str)}"
                loop_cell = cell([r["looped"] - r["began"] for r in mine], lambda x: f"{x:.1f}") if phase == "loop" else ""
                lines.append(f"| {n:,} | {who} | {loop_cell} | {phase} | {cell([x['median'] for x in w], ms)} | "
                             f"{cell([x['worst'] for x in w], ms)} | {cell([x['per_second'] for x in w], lambda x: f'{x:.0f}')} | "
                             f"{cell([x['median'] for x in rd], ms)} | {cell([x['worst'] for x in rd], ms)} | "
                             f"{cell([x['per_second'] for x in rd], lambda x: f'{x:.0f}')} | "
                             f"{cell([x['rows'] for x in rd], lambda x: f'{x:.0f}')} | {slru_cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
