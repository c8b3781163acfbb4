package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// Tenant is a database of its own with an outbox table, as a database-per-
// tenant application (Laravel multi-tenancy) has one per customer, and what
// its producers committed.
type Tenant struct {
	Database string
	DB       *sql.DB
	Rec      *Produced
}

// TenantPrefix returns a database name prefix of the test's own, short
// enough for tenant names after it (database names have 64 characters at
// most).
func TenantPrefix(t testing.TB) string {
	return fmt.Sprintf("mt%08x", crc32.ChecksumIEEE([]byte(fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()))))
}

// NewTenant creates the database name with an outbox table (default mapping)
// on srv, dropped when the test ends.
func NewTenant(t testing.TB, srv *testsvc.MariaDB, name string) *Tenant {
	t.Helper()
	srv.Exec(t, "CREATE DATABASE `"+name+"`")
	t.Cleanup(func() {
		db, err := sql.Open("mysql", srv.DSN(""))
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	})
	db := srv.Open(t, name)
	db.SetMaxOpenConns(8)
	if err := schema.Apply(context.Background(), db, "outbox", schema.DefaultMapping()); err != nil {
		t.Fatalf("create %s.outbox: %v", name, err)
	}
	return &Tenant{Database: name, DB: db, Rec: NewProduced()}
}

// NewTenants creates n tenants, prefix_tenant_01 to prefix_tenant_<n>.
func NewTenants(t testing.TB, srv *testsvc.MariaDB, prefix string, n int) []*Tenant {
	t.Helper()
	out := make([]*Tenant, n)
	for i := range out {
		out[i] = NewTenant(t, srv, TenantName(prefix, i+1))
	}
	return out
}

// TenantName is the database of tenant i (from 1) under prefix.
func TenantName(prefix string, i int) string { return fmt.Sprintf("%s_tenant_%02d", prefix, i) }

// TenantPattern is the --table pattern of the tenants under prefix.
func TenantPattern(prefix string) string { return prefix + "_tenant_*.outbox" }

// Committed returns how many events the tenant's producers committed.
func (tn *Tenant) Committed() int {
	tn.Rec.mu.Lock()
	defer tn.Rec.mu.Unlock()
	return len(tn.Rec.Committed)
}
