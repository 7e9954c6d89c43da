// pgfence from Go (pgx v4), through its SQL interface: a lease and a write fenced by its token, then
// a fenced session lock on the same name and a write fenced by its (higher) token, then a write with
// the lease's token, now stale, which the guard refuses.
//
//	DATABASE_URL=postgres://user@host/db go run examples/other-languages/invoice.go
//	(with DATABASE_URL unset, pgx reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD)
//
// With Debian's pgx (golang-github-jackc-pgx-v4-dev): GOPATH=/usr/share/gocode GO111MODULE=off.
// Needs pgfence's schema (`pgfence migrate`). Exits 1 on any failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v4"
)

const name = "invoice:42"

// The guarded write: 0 rows means a newer holder (a higher token) has written the row.
const guardedWrite = `UPDATE example_invoices SET status = $1, fencing_token = $2
 WHERE id = 42 AND (fencing_token IS NULL OR fencing_token <= $2)`

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	// One connection, not a pool: a session lock belongs to the connection that took it. pgx runs in
	// autocommit unless told otherwise: each call below commits at once, as the SQL interface expects.
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, statement := range []string{
		"SET statement_timeout = '30s'", // bounds every wait below
		"CREATE TABLE IF NOT EXISTS example_invoices (id int PRIMARY KEY, status text, fencing_token bigint)",
		"INSERT INTO example_invoices (id, status) VALUES (42, 'open') ON CONFLICT (id) DO NOTHING",
	} {
		if _, err := conn.Exec(ctx, statement); err != nil {
			return err
		}
	}
	var key int64
	if err := conn.QueryRow(ctx, "SELECT pgfence.lock_key($1)", name).Scan(&key); err != nil {
		return err
	}
	fmt.Printf("key of %s: %d\n", name, key)

	leaseToken, err := withLease(ctx, conn, key)
	if err != nil {
		return err
	}
	return withSessionLock(ctx, conn, key, leaseToken)
}

func fencedWrite(ctx context.Context, conn *pgx.Conn, token int64, status string) (bool, error) {
	tag, err := conn.Exec(ctx, guardedWrite, status, token)
	return err == nil && tag.RowsAffected() == 1, err
}

// giveBack runs the statement that gives back what is held (true: it was still held) and prints
// `released`; false is the failure `lost`. Deferred, after any failure: the first one is reported.
func giveBack(conn *pgx.Conn, err *error, released, lost, statement string, args ...interface{}) {
	var held bool
	e := conn.QueryRow(context.Background(), statement, args...).Scan(&held)
	switch {
	case *err != nil:
	case e != nil:
		*err = e
	case !held:
		*err = errors.New(lost)
	default:
		fmt.Println(released)
	}
}

// 1. A lease: waits up to 10 s, held for at most 30 s unless renewed (renew_lease). Returns its token.
func withLease(ctx context.Context, conn *pgx.Conn, key int64) (_ int64, err error) {
	var granted *int64 // NULL: not granted within the timeout
	if err := conn.QueryRow(ctx, `SELECT pgfence.lease(p_key => $1, p_ttl_ms => 30000, p_timeout_ms => 10000,
		p_owner => 'invoice.go', p_name => $2)`, key, name).Scan(&granted); err != nil {
		return 0, err
	}
	if granted == nil {
		return 0, errors.New("lease: not granted within 10 s")
	}
	token := *granted
	fmt.Printf("lease: token %d\n", token)
	defer giveBack(conn, &err, "lease: released", "lease: lost before its release (expired or taken over)",
		"SELECT pgfence.release_lease($1, $2)", key, token)
	applied, err := fencedWrite(ctx, conn, token, "paid")
	if err != nil {
		return 0, err
	}
	if !applied {
		return 0, errors.New("lease: fenced write refused: a newer holder wrote invoice 42")
	}
	fmt.Println("lease: fenced write applied (invoice 42 paid)")
	return token, nil
}

// 2. A fenced session lock of this connection: held from here until unlock. 3. A write with the
// lease's token, as a holder that paused past its lease would make it: refused.
func withSessionLock(ctx context.Context, conn *pgx.Conn, key int64, staleToken int64) (err error) {
	var token int64
	if err := conn.QueryRow(ctx, "SELECT pgfence.lock_fenced($1)", key).Scan(&token); err != nil {
		return err
	}
	fmt.Printf("session lock: token %d\n", token)
	defer giveBack(conn, &err, "session lock: released", "session lock: not held at unlock", "SELECT pgfence.unlock($1)", key)
	applied, err := fencedWrite(ctx, conn, token, "shipped")
	if err != nil {
		return err
	}
	if !applied {
		return errors.New("session lock: fenced write refused: a newer holder wrote invoice 42")
	}
	fmt.Println("session lock: fenced write applied (invoice 42 shipped)")

	applied, err = fencedWrite(ctx, conn, staleToken, "cancelled")
	if err != nil {
		return err
	}
	if applied {
		return fmt.Errorf("stale token %d: write applied", staleToken)
	}
	var holds int64
	if err := conn.QueryRow(ctx, "SELECT fencing_token FROM example_invoices WHERE id = 42").Scan(&holds); err != nil {
		return err
	}
	fmt.Printf("stale token %d: write refused (invoice 42 holds token %d)\n", staleToken, holds)
	return nil
}
