# CPython's sqlite3: python3 python.py FILE N Q
import sqlite3, sys, time
file, n, q = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
con = sqlite3.connect(file, isolation_level=None)
assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal", "Python peer is not in WAL mode"
con.execute("CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)")
t0 = time.process_time()
con.execute("BEGIN")
for i in range(1, n + 1):
    con.execute("INSERT INTO bench (name, score, qty) VALUES (?, ?, ?)", ("name%d" % i, i * 0.5, i))
con.execute("COMMIT")
t1 = time.process_time()
total = 0
for (qty,) in con.execute("SELECT qty FROM bench"):
    total += qty
t2 = time.process_time()
found = 0
for i in range(1, q + 1):
    row = con.execute("SELECT id, name, score, qty FROM bench WHERE id = ?", ((i * 7919) % n + 1,)).fetchone()
    found += row[3]
t3 = time.process_time()
print("%.1f %.1f %.1f %d" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, total + found))
