package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// requirementsGrants returns the statements of docs/requirements.md's SQL
// block that creates the relay's user, as a reader pastes them: comments
// dropped, the password and the database filled in.
func requirementsGrants(t *testing.T, password, database string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "requirements.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```sql\nCREATE USER 'relay'@'%'")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/requirements.md has no SQL block creating 'relay'@'%'")
	}
	var stmts []string
	for _, line := range strings.Split("CREATE USER 'relay'@'%'"+block, "\n") {
		line, _, _ = strings.Cut(line, "--")
		line = strings.TrimSuffix(strings.TrimSpace(line), ";")
		if line == "" {
			continue
		}
		line = strings.ReplaceAll(line, "'…'", "'"+password+"'")
		stmts = append(stmts, strings.ReplaceAll(line, " app.", " `"+database+"`."))
	}
	return stmts
}

// TestDocs_RequirementsGrantsWork follows docs/requirements.md literally
// (issue 41: its grant came before the table existed, ERROR 1146): on a new
// server the table first, then the page's statements, and check passes as
// the user they create.
func TestDocs_RequirementsGrantsWork(t *testing.T) {
	// Its MariaDB is its own: the page's user is 'relay'@'%'.
	t.Parallel()
	m := testsvc.StartMariaDB(t, testsvc.MariaDBOptions{})
	env := relaytest.NewEnv(t, m, testsvc.SharedRedis(t)) // schema apply's table
	stmts := requirementsGrants(t, "s3cret-9", env.Database)
	if len(stmts) < 3 {
		t.Fatalf("statements %q, want the user and its grants", stmts)
	}
	m.Exec(t, stmts...)
	global := []string{"--mysql-dsn", m.UserDSN("relay", "s3cret-9", env.Database), "--redis-url", env.RedisURL}
	if out, errOut, code := run(t, append(global, "check", "--mode", "binlog")...); code != 0 {
		t.Errorf("check as the page's relay user: exit %d, want 0\n%s%s", code, out, errOut)
	}
}
