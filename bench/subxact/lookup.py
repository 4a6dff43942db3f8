#!/usr/bin/env python3
"""The reader's cost of a suboverflowed snapshot, apart from the load
(bench/subxact/README.md):

    bench/subxact/lookup.py OPSH [--runs 3] [--rows 10000] [--seconds 10]

While a transaction that wrote 100 statements is held open (by opsh: under
its statement savepoints, past PostgreSQL's 64 cached subtransactions; by
psql: the same UPDATEs without savepoints; or none), ROWS telemetry rows
are committed one transaction each and the backend reader (backend.c)
counts them for SECONDS, every 5 ms. Prints, per holder, the medians over
the runs of the reader's fastest, median and 90th-percentile query (the
fastest is the figure the machine's load moves least) and pg_stat_slru's
Subtrans hits per query.
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import here, root, sh, psql, slru, repair_psql, read_log  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("opsh")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=10)
    options = parser.parse_args()
    opsh = os.path.abspath(options.opsh)
    work = tempfile.mkdtemp(prefix="opsh-lookup-")
    server = f"/tmp/opsh-lk-{os.getpid()}"
    env = dict(os.environ, HOME=work, XDG_STATE_HOME=work + "/state", XDG_DATA_HOME=work + "/data",
               XDG_CONFIG_HOME=work + "/config")
    url = sh(f"{root}/scripts/pg-server", "start", server).strip().splitlines()[-1]
    try:
        backend = work + "/backend"
        sh("cc", "-O2", "-o", backend, here + "/backend.c", "-I/usr/include/postgresql", "-lpq")
        sh(opsh, "--db", url, "--create", "-e", "return 1", env=env)
        psql(url, """
            INSERT INTO projects VALUES ('com.example.app', 'App', 'App', '/app', 0);
            INSERT INTO schemes (id, projectbundleidentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeid, versionstring, buildnumber, status, createdat)
              SELECT format('b%s', lpad(i::text, 6, '0')), 's1', '1.0', i, 'running', i
              FROM generate_series(1, 100) i;""")
        results = {"none": [], "psql": [], "opsh": []}
        mark = 0
        hold = options.seconds + 30
        for rep in range(options.runs):
            holders = ["none", "psql", "opsh"]
            for who in holders[rep % 3:] + holders[:rep % 3]:
                mark += 1
                status = "failed" if mark % 2 else "running"
                holder = None
                if who == "opsh":
                    holder = subprocess.Popen([opsh, "run", "--no-lock", "--db", url, here + "/repair.lua", "100", status,
                                               str(mark), str(hold)], env=env, stdout=subprocess.DEVNULL)
                elif who == "psql":
                    holder = subprocess.Popen(["python3", "-B", "-c", "import sys, run; print(run.repair_psql(*sys.argv[1:3], 100, sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))",
                                               url, work, status, str(mark), str(hold)], cwd=here, stdout=subprocess.DEVNULL)
                if holder:
                    # Its 100 UPDATEs done: it has taken an xid and waits in its hold.
                    deadline = time.time() + 30
                    while psql(url, "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
                                    "AND state = 'idle in transaction' AND pid <> pg_backend_pid()") != "1":
                        if time.time() > deadline:
                            sys.exit(f"the {who} holder did not start")
                        time.sleep(0.05)
                started = time.time()
                psql(url, f"DO $$ BEGIN FOR i IN 1..{options.rows} LOOP "
                          f"INSERT INTO telemetry (event, created_at) VALUES ('lookup', extract(epoch FROM clock_timestamp())); "
                          f"COMMIT; END LOOP; END $$")
                window = time.time() - started + 0.5
                before = slru(url)
                stop = f"{work}/stop-{mark}"
                log = f"{work}/read-{mark}.log"
                reader = subprocess.Popen([backend, "read", url, stop, log, f"{window + options.seconds}"], stdout=subprocess.PIPE, text=True)
                reader.stdout.readline()
                time.sleep(options.seconds)
                open(stop, "w").close()
                reader.wait()
                if holder and holder.poll() is not None:
                    sys.exit(f"the {who} holder ended before the reader did")
                samples = read_log(log)
                if holder:
                    holder.wait()
                    if holder.returncode != 0:
                        sys.exit(f"the {who} holder failed")
                time.sleep(2.5)
                after = slru(url)
                waits = sorted(s[1] for s in samples)
                rows = statistics.median(s[2] for s in samples)
                if rows < options.rows:
                    sys.exit(f"the reader counted {rows} rows, not {options.rows} or more")
                results[who].append({"fastest": waits[0], "median": statistics.median(waits),
                                     "p90": waits[int(len(waits) * 0.9)], "queries": len(waits), "rows": rows,
                                     "hits": (after["hit"] - before["hit"]) / len(waits), "reads": after["read"] - before["read"]})
                print(who, results[who][-1], file=sys.stderr)
        print("| holder | reader fastest ms | median ms | 90th percentile ms | queries | rows counted | Subtrans hits per query | Subtrans reads |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for who, runs in results.items():
            def cell(key, fmt):
                values = sorted(r[key] for r in runs)
                return f"{fmt(statistics.median(values))} ({fmt(values[0])}–{fmt(values[-1])})"
            ms = lambda x: f"{x * 1000:.2f}"
            print(f"| {who} | {cell('fastest', ms)} | {cell('median', ms)} | {cell('p90', ms)} | {cell('queries', str)} | "
                  f"{cell('rows', lambda x: f'{x:.0f}')} | {cell('hits', lambda x: f'{x:.0f}')} | {cell('reads', str)} |")
    finally:
        subprocess.run([f"{root}/scripts/pg-server", "stop", server])


if __name__ == "__main__":
    main()
