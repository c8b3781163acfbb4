package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/mode"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// carriedFlags turns the mapping and extra columns of env into the flags a
// user gives.
func carriedFlags(env *relaytest.Env) []string {
	var args []string
	if env.Mapping != nil {
		for _, f := range env.Mapping.Flags() {
			args = append(args, "--column", f)
		}
	}
	for _, e := range env.Extra {
		args = append(args, "--extra-column", e.Column+"="+e.Field)
	}
	return args
}

// The conformance case of the carried columns through the command line, in
// both modes: --column schema_version=... and --extra-column reach the
// reader and the poller.
func TestRun_CarriedColumns(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	for _, m := range []string{mode.Binlog, mode.Poll} {
		t.Run(m, func(t *testing.T) {
			env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
			relaytest.CarriedColumns(t, env, func(t *testing.T, env *relaytest.Env) func() error {
				p := startRelay(t, env, append([]string{"--mode", m}, carriedFlags(env)...)...)
				if m == mode.Binlog {
					waitStoredPosition(t, env, posKey(env))
				}
				return func() error {
					p.Signal(t, syscall.SIGTERM)
					if code := p.Wait(t, 30*time.Second); code != 0 {
						return fmt.Errorf("relay exited %d:\n%s", code, relaytest.TailLines(p.Out.String(), 20))
					}
					if out := p.Out.String(); !strings.Contains(out, "schema_version (column payload_version), tenant (column tenant_id), aggregate_version") {
						return fmt.Errorf("the start-up log does not name the carried columns:\n%s", relaytest.TailLines(out, 20))
					}
					return nil
				}
			})
		})
	}
}

// check names the columns the entries carry, and fails on an extra column
// the table lacks with the columns it has, or on one of a type the modes
// would render differently.
func TestCheck_ExtraColumns(t *testing.T) {
	// Its database, Redis database and server id are its own.
	t.Parallel()
	env := relaytest.NewEnv(t, testsvc.SharedMariaDB(t), testsvc.SharedRedis(t))
	if _, err := env.DB.Exec("ALTER TABLE outbox ADD tenant_id VARCHAR(64) NULL, ADD created DATETIME NULL"); err != nil {
		t.Fatal(err)
	}
	global := []string{"--mysql-dsn", env.MariaDB.DSN(env.Database), "--redis-url", env.RedisURL}
	out, errOut, code := run(t, append(global, "--extra-column", "tenant_id=tenant", "check")...)
	if code != 0 || !strings.Contains(out, "entries also carry schema_version, tenant (column tenant_id); a NULL leaves the field out") {
		t.Errorf("check --extra-column tenant_id=tenant: exit %d, want 0 and the carried fields named\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append(global, "--extra-column", "tennant_id", "check")...)
	if code == 0 || !strings.Contains(out, "FAIL  outbox table") ||
		!strings.Contains(out, "column tennant_id (--extra-column) is missing; the table's columns are id, message_id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, occurred_at, sent_at, tenant_id, created") {
		t.Errorf("check --extra-column tennant_id: exit %d, want the missing column to fail with the table's columns\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, append(global, "--extra-column", "created", "check")...)
	if code == 0 || !strings.Contains(out, "column created (--extra-column) has type DATETIME") {
		t.Errorf("check --extra-column created: exit %d, want the DATETIME column to fail\n%s%s", code, out, errOut)
	}
}
