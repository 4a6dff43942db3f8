# CPython with psycopg 3 (PyPI's psycopg[binary]): python3 python.py URL TABLE N Q
import re, sys, time
import psycopg

url, table, n, q = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert re.fullmatch(r"\w+", table), "a table name"
con = psycopg.connect(url, autocommit=True)
cur = con.cursor()
cur.execute("DROP TABLE IF EXISTS %s" % table)
cur.execute("CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)" % table)
insert = "INSERT INTO %s (id, name, value) VALUES (%%s, %%s, %%s)" % table
w0, c0 = time.perf_counter(), time.process_time()
with con.transaction():
    for i in range(1, n + 1):
        cur.execute(insert, (i, "name%d" % i, i * 0.5))
w1, c1 = time.perf_counter(), time.process_time()
rows, total = 0, 0.0
for (id_, name, value) in cur.execute("SELECT * FROM %s" % table):
    rows += 1
    total += value
w2, c2 = time.perf_counter(), time.process_time()
point, ids = "SELECT * FROM %s WHERE id = %%s" % table, 0
for i in range(1, q + 1):
    k = (i * 7919) % n + 1
    row = cur.execute(point, (k,)).fetchone()
    assert row is not None and row[0] == k and row[1] == "name%d" % k and row[2] == k * 0.5, "wrong row for id %d" % k
    ids += row[0]
w3, c3 = time.perf_counter(), time.process_time()
cur.execute("DROP TABLE %s" % table)
con.close()
print("%.1f %.1f %.1f %.1f %.1f %.1f %d %.1f %d" % (
    (w1 - w0) * 1e3, (w2 - w1) * 1e3, (w3 - w2) * 1e3,
    (c1 - c0) * 1e3, (c2 - c1) * 1e3, (c3 - c2) * 1e3, rows, total, ids))
