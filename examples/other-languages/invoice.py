"""pgfence from Python (psycopg 3), through its SQL interface: a lease and a write fenced by its
token, then a fenced session lock on the same name and a write fenced by its (higher) token, then a
write with the lease's token, now stale, which the guard refuses.

    DATABASE_URL=postgres://user@host/db python3 examples/other-languages/invoice.py
    (with DATABASE_URL unset, libpq reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD)

Needs pgfence's schema (`pgfence migrate`). Exits 1 on any failure.
"""
import os
import sys

import psycopg

NAME = "invoice:42"
# The guarded write: 0 rows means a newer holder (a higher token) has written the row.
GUARDED_WRITE = """UPDATE example_invoices SET status = %(status)s, fencing_token = %(token)s
 WHERE id = 42 AND (fencing_token IS NULL OR fencing_token <= %(token)s)"""


def fenced_write(conn, token, status):
    return conn.execute(GUARDED_WRITE, {"status": status, "token": token}).rowcount == 1


def one(conn, query, params=()):
    return conn.execute(query, params).fetchone()[0]


def main():
    # autocommit: each call below commits at once, as the SQL interface expects (a lease exists, and a
    # session lock is held, once its statement has committed).
    with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True) as conn:
        conn.execute("SET statement_timeout = '30s'")  # bounds every wait below
        conn.execute("CREATE TABLE IF NOT EXISTS example_invoices (id int PRIMARY KEY, status text, fencing_token bigint)")
        conn.execute("INSERT INTO example_invoices (id, status) VALUES (42, 'open') ON CONFLICT (id) DO NOTHING")
        key = one(conn, "SELECT pgfence.lock_key(%s)", [NAME])
        print(f"key of {NAME}: {key}")

        # 1. A lease: waits up to 10 s, held for at most 30 s unless renewed (renew_lease).
        lease_token = one(
            conn,
            "SELECT pgfence.lease(p_key => %s, p_ttl_ms => 30000, p_timeout_ms => 10000, p_owner => 'invoice.py', p_name => %s)",
            [key, NAME],
        )
        if lease_token is None:
            sys.exit("lease: not granted within 10 s")
        print(f"lease: token {lease_token}")
        try:
            if not fenced_write(conn, lease_token, "paid"):
                sys.exit("lease: fenced write refused: a newer holder wrote invoice 42")
            print("lease: fenced write applied (invoice 42 paid)")
        finally:
            released = one(conn, "SELECT pgfence.release_lease(%s, %s)", [key, lease_token])
        if not released:
            sys.exit("lease: lost before its release (expired or taken over)")
        print("lease: released")

        # 2. A fenced session lock of this connection: held from here until unlock.
        lock_token = one(conn, "SELECT pgfence.lock_fenced(%s)", [key])
        print(f"session lock: token {lock_token}")
        try:
            if not fenced_write(conn, lock_token, "shipped"):
                sys.exit("session lock: fenced write refused: a newer holder wrote invoice 42")
            print("session lock: fenced write applied (invoice 42 shipped)")

            # 3. A holder that paused past its lease writes with its old token: refused.
            if fenced_write(conn, lease_token, "cancelled"):
                sys.exit(f"stale token {lease_token}: write applied")
            holds = one(conn, "SELECT fencing_token FROM example_invoices WHERE id = 42")
            print(f"stale token {lease_token}: write refused (invoice 42 holds token {holds})")
        finally:
            unlocked = one(conn, "SELECT pgfence.unlock(%s)", [key])
        if not unlocked:
            sys.exit("session lock: not held at unlock")
        print("session lock: released")


if __name__ == "__main__":
    main()
