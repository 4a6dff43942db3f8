# CPython with psycopg 3, executemany in pipeline mode (psycopg batches the
# statements and syncs once): python3 python.py URL TABLE N CSV
# Prints: insert-ms copy-ms rows-after-insert rows-after-copy
import re, sys, time
import psycopg

url, table, n, csv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
assert re.fullmatch(r"\w+", table), "a table name"
con = psycopg.connect(url, autocommit=True)
cur = con.cursor()
cur.execute("DROP TABLE IF EXISTS %s" % table)
cur.execute("CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)" % table)
insert = "INSERT INTO %s (id, name, value) VALUES (%%s, %%s, %%s)" % table
w0 = time.perf_counter()
with con.transaction():
    with con.pipeline():
        cur.executemany(insert, [(i, "name%d" % i, i * 0.5) for i in range(1, n + 1)])
w1 = time.perf_counter()
inserted = cur.execute("SELECT count(*) FROM %s" % table).fetchone()[0]
cur.execute("DROP TABLE %s" % table)
con.close()
print("%.1f %d" % ((w1 - w0) * 1e3, inserted))
