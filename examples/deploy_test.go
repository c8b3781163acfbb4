package examples_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
)

// There is no YAML parser among the module's dependencies, and no Docker
// engine in CI: these tests read docker-compose.yml and the Dockerfile as
// text. `docker compose config` validates the file where the Compose plugin
// is installed.

// composeService returns the text of one top-level service of
// docker-compose.yml: its indented block.
func composeService(t *testing.T, compose, name string) string {
	t.Helper()
	lines := strings.Split(compose, "\n")
	start := -1
	for i, l := range lines {
		if l == "  "+name+":" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if l := lines[i]; l != "" && !strings.HasPrefix(l, "   ") {
			end = i
			break
		}
	}
	return strings.Join(lines[start:end], "\n")
}

// serverOptions returns the --name=value options of a block, names with '_'.
func serverOptions(block string) map[string]string {
	opts := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*-?\s*"?--([a-z0-9_-]+)(?:=([^"\s]*))?`).FindAllStringSubmatch(block, -1) {
		opts[strings.ReplaceAll(m[1], "-", "_")] = m[2]
	}
	return opts
}

// TestDockerCompose_MySQLMatchesTestSuite checks that the MySQL of
// docker-compose.yml has the binlog settings the test suite's MariaDB runs
// with, and what MySQL 8 needs besides.
func TestDockerCompose_MySQLMatchesTestSuite(t *testing.T) {
	compose := readFile(t, "docker-compose.yml")
	mysql := composeService(t, compose, "mysql")
	got := serverOptions(mysql)
	suite := serverOptions(strings.Join(testsvc.DefaultMariaDBArgs, "\n"))
	for _, name := range []string{"binlog_format", "binlog_row_image", "binlog_row_metadata"} {
		if suite[name] == "" {
			t.Fatalf("testsvc.DefaultMariaDBArgs has no --%s: %v", name, testsvc.DefaultMariaDBArgs)
		}
		if !strings.EqualFold(got[name], suite[name]) {
			t.Errorf("docker-compose.yml mysql: %s=%q, the test suite runs with %q", name, got[name], suite[name])
		}
	}
	for name, want := range map[string]string{"log_bin": "", "gtid_mode": "ON", "enforce_gtid_consistency": "ON"} {
		if v, ok := got[name]; !ok || (want != "" && v != want) {
			t.Errorf("docker-compose.yml mysql: --%s=%q, want it set to %q", name, v, want)
		}
	}
	if id := got["server_id"]; id == "" || id == "0" || id == "1001" {
		t.Errorf("docker-compose.yml mysql: --server-id=%q, want one that differs from the relay's 1001", id)
	}
	for _, want := range []string{"image: mysql:8.0", "./deploy/mysql/init.sql:/docker-entrypoint-initdb.d/", "healthcheck:", "MYSQL_DATABASE: app"} {
		if !strings.Contains(mysql, want) {
			t.Errorf("docker-compose.yml mysql lacks %q", want)
		}
	}
}

func TestDockerCompose_RedisAndRelay(t *testing.T) {
	compose := readFile(t, "docker-compose.yml")
	redis := composeService(t, compose, "redis")
	for _, want := range []string{"image: redis:7", `"--appendonly", "yes"`, "healthcheck:", `"--maxmemory-policy", "noeviction"`} {
		if !strings.Contains(redis, want) {
			t.Errorf("docker-compose.yml redis lacks %s", want)
		}
	}
	if !regexp.MustCompile(`"--appendfsync", "(always|everysec)"`).MatchString(redis) {
		t.Errorf("docker-compose.yml redis: want --appendfsync always or everysec")
	}

	relay := composeService(t, compose, "relay")
	for _, want := range []string{
		"build: .",
		"BINLOG_OUTBOX_MODE: binlog",
		"BINLOG_OUTBOX_MYSQL_DSN: relay:relay-secret@tcp(mysql:3306)/app",
		"BINLOG_OUTBOX_REDIS_URL: redis://redis:6379/0",
		"condition: service_healthy",
	} {
		if !strings.Contains(relay, want) {
			t.Errorf("docker-compose.yml relay lacks %q", want)
		}
	}
	if n := strings.Count(relay, "condition: service_healthy"); n != 2 {
		t.Errorf("docker-compose.yml relay waits for %d healthy services, want mysql and redis", n)
	}
	// The user and password of the DSN and of the MySQL health check are the
	// ones init.sql creates.
	initSQL := readFile(t, "deploy", "mysql", "init.sql")
	if !strings.Contains(initSQL, "CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-secret';") ||
		!strings.Contains(composeService(t, compose, "mysql"), `"-u", "relay", "-prelay-secret"`) {
		t.Errorf("the relay user of deploy/mysql/init.sql and of docker-compose.yml differ")
	}
	for _, want := range []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';", "GRANT SELECT, UPDATE (sent_at) ON app.outbox TO 'relay'@'%';"} {
		if !strings.Contains(initSQL, want) {
			t.Errorf("deploy/mysql/init.sql lacks %q", want)
		}
	}

	// Validate the whole file where the Compose plugin exists; the client
	// needs no engine for this.
	if exec.Command("docker", "compose", "version").Run() == nil {
		cmd := exec.Command("docker", "compose", "-f", repo(t, "docker-compose.yml"), "config", "--quiet")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker compose config: %v\n%s", err, out)
		}
	} else {
		t.Log("docker compose is not installed: docker-compose.yml checked as text only")
	}
}

// TestDockerfile checks the Dockerfile by text. It does not build with
// CGO_ENABLED=0: that recompiles the standard library and every dependency
// (minutes on a small CI machine) for little: the module has no cgo code.
func TestDockerfile(t *testing.T) {
	df := readFile(t, "Dockerfile")
	for _, want := range []string{
		"FROM golang:1.26",
		"CGO_ENABLED=0 go build",
		"-X main.version=${VERSION}",
		"./cmd/binlog-outbox",
		"FROM gcr.io/distroless/static",
		"USER nonroot",
		`ENTRYPOINT ["/usr/local/bin/binlog-outbox"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	goMod := readFile(t, "go.mod")
	if m := regexp.MustCompile(`(?m)^go (1\.\d+)`).FindStringSubmatch(goMod); m == nil || !strings.Contains(df, "FROM golang:"+m[1]) {
		t.Errorf("the Dockerfile's Go image does not match the go directive of go.mod (%v)", m)
	}
}
