package examples_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// There is no Docker engine in CI: these tests read docker-compose.yml and
// the Dockerfile as text. `docker compose config` validates the file where the Compose plugin
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

// The files operators deploy (deploy/prometheus, deploy/grafana,
// deploy/systemd, deploy/kubernetes) are checked with the tools that read
// them where Debian has those (promtool, systemd-analyze) and parsed
// otherwise; every flag and variable they give the relay must be one of its.

// relayMetrics are the relay's metric names that the alerts and the
// dashboard may use, with "histogram" for those whose series carry the
// _bucket, _sum and _count suffixes. Each must be declared in
// metrics/metrics.go or documented in docs/monitoring.md.
var relayMetrics = map[string]string{
	"binlog_outbox_events_appended_total":             "counter",
	"binlog_outbox_dead_letters_total":                "counter",
	"binlog_outbox_statement_inserts_total":           "counter",
	"binlog_outbox_batches_total":                     "counter",
	"binlog_outbox_errors_total":                      "counter",
	"binlog_outbox_lag_seconds":                       "gauge",
	"binlog_outbox_bytes_behind":                      "gauge",
	"binlog_outbox_binlog_retention_headroom_seconds": "gauge",
	"binlog_outbox_ready":                             "gauge",
	"binlog_outbox_unsent_rows":                       "gauge",
	"binlog_outbox_oldest_unsent_age_seconds":         "gauge",
	"binlog_outbox_append_duration_seconds":           "histogram",
	"binlog_outbox_batch_entries":                     "histogram",
	"binlog_outbox_group_pending":                     "gauge",
	"binlog_outbox_group_lag":                         "gauge",
	"binlog_outbox_group_consumers":                   "gauge",
	"binlog_outbox_group_idle_consumers":              "gauge",
	"binlog_outbox_group_oldest_pending_age_seconds":  "gauge",
	"binlog_outbox_group_oldest_pending_deliveries":   "gauge",
	"binlog_outbox_group_holds_back_trim":             "gauge",
	"binlog_outbox_group_trim_held_age_seconds":       "gauge",
}

var metricName = regexp.MustCompile(`\bbinlog_outbox_[a-z0-9_]+`)

// checkMetricNames fails for each binlog_outbox_* name in text that is no
// relay metric (or series of one), and returns the metrics it names.
func checkMetricNames(t *testing.T, file, text string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, name := range metricName.FindAllString(text, -1) {
		base := name
		if _, ok := relayMetrics[name]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && relayMetrics[b] == "histogram" {
					base = b
				}
			}
		}
		if _, ok := relayMetrics[base]; !ok {
			t.Errorf("%s uses %s, which is not a metric of the relay (relayMetrics)", file, name)
			continue
		}
		used[base] = true
	}
	return used
}

func TestRelayMetrics_Exist(t *testing.T) {
	source := readFile(t, "metrics", "metrics.go")
	docs := readFile(t, "docs", "monitoring.md")
	for name := range relayMetrics {
		short := strings.TrimPrefix(name, "binlog_outbox_")
		if !strings.Contains(source, `"`+short+`"`) && !strings.Contains(source, `"`+name+`"`) && !strings.Contains(docs, name) {
			t.Errorf("%s is neither declared in metrics/metrics.go nor documented in docs/monitoring.md", name)
		}
	}
}

// requireTool fails, never skips, when a checking tool is missing.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH; install it with: apt-get install -y %s (scripts/test.sh installs it)", name, pkg)
	}
	return p
}

// alertRules returns the alerts of a Prometheus rule file by name, with
// their expressions.
func alertRules(t *testing.T, text string) map[string]string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r.Expr
			}
		}
	}
	return out
}

func TestPrometheusAlerts(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	dir := repo(t, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	alerts := alertRules(t, readFile(t, "deploy", "prometheus", "alerts.yml"))
	used := map[string]bool{}
	for name, expr := range alerts {
		for m := range checkMetricNames(t, "alert "+name, expr) {
			used[m] = true
		}
	}
	for _, m := range []string{"binlog_outbox_lag_seconds", "binlog_outbox_binlog_retention_headroom_seconds", "binlog_outbox_dead_letters_total",
		"binlog_outbox_statement_inserts_total", "binlog_outbox_ready", "binlog_outbox_oldest_unsent_age_seconds"} {
		if !used[m] {
			t.Errorf("no alert uses %s", m)
		}
	}

	// Every alert is shown to fire, and to stay quiet, in the unit tests.
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "deploy", "prometheus", "alerts_test.yml")), &tests); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tt := range tests.Tests {
		for _, a := range tt.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for name := range alerts {
		if !fires[name] || !quiet[name] {
			t.Errorf("alerts_test.yml: alert %s fires in a test: %v, stays quiet in one: %v; want both", name, fires[name], quiet[name])
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	raw := readFile(t, "deploy", "grafana", "binlog-outbox.json")
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("binlog-outbox.json is not valid JSON: %v", err)
	}
	exprs := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs[tg.Expr] = true
			checkMetricNames(t, "panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		checkMetricNames(t, "variable "+v.Name, v.Definition)
	}
	all := strings.Join(slices.Sorted(maps.Keys(exprs)), "\n")
	for _, want := range []string{
		"rate(binlog_outbox_events_appended_total", "binlog_outbox_lag_seconds", "binlog_outbox_bytes_behind",
		"binlog_outbox_binlog_retention_headroom_seconds", "histogram_quantile(0.99, sum by (le, instance, mode) (rate(binlog_outbox_append_duration_seconds_bucket",
		"binlog_outbox_batch_entries", "binlog_outbox_dead_letters_total", "binlog_outbox_ready",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel queries %s", want)
		}
	}
}

// runHelp is what `binlog-outbox run --help` prints.
func runHelp(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(exampletest.Build(t, "./cmd/binlog-outbox"), "run", "--help").Output()
	if err != nil {
		t.Fatalf("binlog-outbox run --help: %v", err)
	}
	return string(out)
}

// relayOptions returns the flags of `binlog-outbox run` and their
// environment variables, from the binary's own --help.
func relayOptions(t *testing.T) (flags, envs map[string]bool) {
	t.Helper()
	out := runHelp(t)
	flags, envs = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`).FindAllStringSubmatch(out, -1) {
		flags[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\$(BINLOG_OUTBOX_[A-Z0-9_]+)`).FindAllStringSubmatch(out, -1) {
		envs[m[1]] = true
	}
	if !flags["mysql-dsn"] || !envs["BINLOG_OUTBOX_MODE"] {
		t.Fatalf("run --help lists no --mysql-dsn or $BINLOG_OUTBOX_MODE:\n%s", out)
	}
	return flags, envs
}

// checkRunArgs fails for each --flag of args that `run` does not have.
func checkRunArgs(t *testing.T, file string, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	set := map[string]string{}
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, value, _ := strings.Cut(name, "=")
		if !flags[name] {
			t.Errorf("%s: --%s is not a flag of binlog-outbox run", file, name)
		}
		set[name] = value
	}
	return set
}

func checkEnvNames(t *testing.T, file string, names []string, envs map[string]bool) {
	t.Helper()
	for _, n := range names {
		if strings.HasPrefix(n, "BINLOG_OUTBOX_") && !envs[n] {
			t.Errorf("%s: %s is not an environment variable of binlog-outbox run", file, n)
		}
	}
}

// envFileNames returns the variables an environment file sets or mentions
// (commented out), so that examples in comments are checked too.
func envFileNames(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#?(BINLOG_OUTBOX_[A-Z0-9_]+)=`).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// shutdownGrace is the default of --shutdown-grace, from run --help.
func shutdownGrace(t *testing.T) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`--shutdown-grace .*\(default: ([0-9a-z.]+)\)`).FindStringSubmatch(runHelp(t))
	if m == nil {
		t.Fatalf("run --help shows no default of --shutdown-grace")
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSystemdUnit(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze", "systemd")
	unit := readFile(t, "deploy", "systemd", "binlog-outbox.service")
	directives := map[string][]string{}
	for _, l := range strings.Split(unit, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	for key, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "SystemCallFilter": "@system-service", "Restart": "on-failure",
		"EnvironmentFile": "/etc/binlog-outbox/env", "LoadCredential": "mysql-password:/etc/binlog-outbox/mysql-password",
	} {
		if !slices.Contains(directives[key], want) {
			t.Errorf("binlog-outbox.service: want %s=%s, have %q", key, want, directives[key])
		}
	}
	stop, err := time.ParseDuration(strings.Join(directives["TimeoutStopSec"], ""))
	if grace := shutdownGrace(t); err != nil || stop < 3*grace {
		t.Errorf("binlog-outbox.service: TimeoutStopSec=%q, want well beyond the relay's --shutdown-grace (%s)", directives["TimeoutStopSec"], grace)
	}

	// The flags of ExecStart and the variables of env.example are the
	// relay's; the password comes from the credential.
	flags, envs := relayOptions(t)
	exec0 := strings.Fields(strings.Join(directives["ExecStart"], ""))
	if len(exec0) < 2 || exec0[0] != "/usr/local/bin/binlog-outbox" || exec0[1] != "run" {
		t.Fatalf("ExecStart %q: want /usr/local/bin/binlog-outbox run ...", exec0)
	}
	set := checkRunArgs(t, "binlog-outbox.service", exec0[2:], flags)
	if set["mysql-password-file"] != "%d/mysql-password" {
		t.Errorf("ExecStart: --mysql-password-file=%q, want the credential %%d/mysql-password", set["mysql-password-file"])
	}
	env := readFile(t, "deploy", "systemd", "env.example")
	checkEnvNames(t, "env.example", envFileNames(env), envs)
	if regexp.MustCompile(`(?m)^[^#]*:[^@/]+@tcp`).MatchString(env) {
		t.Errorf("env.example has a password in a DSN; it belongs in the credential file")
	}

	// systemd-analyze verify needs the binary to exist: point ExecStart at
	// the one built for the tests. It reports problems (unknown keys or
	// system call groups) on stderr with exit status 0: any output fails.
	dir := t.TempDir()
	bin := exampletest.Build(t, "./cmd/binlog-outbox")
	path := filepath.Join(dir, "binlog-outbox.service")
	if err := os.WriteFile(path, []byte(strings.Replace(unit, "ExecStart=/usr/local/bin/binlog-outbox", "ExecStart="+bin, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The sandboxing, as systemd rates it: 0 (locked down) to 10 (none);
	// --threshold is in tenths.
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Errorf("systemd-analyze security: %v, want an exposure of at most 2.0: %s", err, lines[len(lines)-1])
	}
}

// yamlDocs parses every document of the YAML files of a directory.
func yamlDocs(t *testing.T, dir string) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files in %s (%v)", dir, err)
	}
	out := map[string][]map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			kind, _ := doc["kind"].(string)
			out[kind] = append(out[kind], doc)
		}
	}
	return out
}

// at walks a parsed YAML document by keys and list indexes.
func at(doc any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := doc.(map[string]any)
			doc = m[k]
		case int:
			l, _ := doc.([]any)
			if k >= len(l) {
				return nil
			}
			doc = l[k]
		}
	}
	return doc
}

// peakRSS is the largest peak RSS BENCHMARKS.md measured, in MB.
func peakRSS(t *testing.T) float64 {
	t.Helper()
	col, peak := -1, 0.0
	for _, l := range strings.Split(readFile(t, "BENCHMARKS.md"), "\n") {
		fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		if i := slices.Index(fields, "peak RSS MB"); i >= 0 {
			col = i
			continue
		}
		if col >= 0 && len(fields) > col {
			if v, err := strconv.ParseFloat(fields[col], 64); err == nil && v > peak {
				peak = v
			}
		}
	}
	if peak == 0 {
		t.Fatal("BENCHMARKS.md has no peak RSS column with values")
	}
	return peak
}

func TestKubernetesManifests(t *testing.T) {
	docs := yamlDocs(t, repo(t, "deploy", "kubernetes"))
	if len(docs["Deployment"]) != 1 || len(docs["Secret"]) != 1 || len(docs["ConfigMap"]) != 1 {
		t.Fatalf("want one Deployment, Secret and ConfigMap; have %d, %d, %d", len(docs["Deployment"]), len(docs["Secret"]), len(docs["ConfigMap"]))
	}
	d := docs["Deployment"][0]
	// Two relays take turns through the lease: one reads, one stands by, and
	// a rollout never stops both.
	if got := at(d, "spec", "replicas"); got != 2 {
		t.Errorf("Deployment replicas %v, want 2 (a standby with the lease)", got)
	}
	if got, unavailable := at(d, "spec", "strategy", "type"), at(d, "spec", "strategy", "rollingUpdate", "maxUnavailable"); got != "RollingUpdate" || unavailable != 0 {
		t.Errorf("Deployment strategy %v with maxUnavailable %v, want RollingUpdate with 0 (a rollout keeps a relay)", got, unavailable)
	}
	pod := at(d, "spec", "template", "spec")
	c := at(pod, "containers", 0)

	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if got := at(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s on %v, want %s", probe, got, path)
		}
	}
	if at(pod, "securityContext", "runAsNonRoot") != true || at(c, "securityContext", "readOnlyRootFilesystem") != true ||
		at(c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Errorf("want runAsNonRoot, readOnlyRootFilesystem and no privilege escalation: pod %v, container %v", at(pod, "securityContext"), at(c, "securityContext"))
	}
	limit, _ := at(c, "resources", "limits", "memory").(string)
	mi, err := strconv.Atoi(strings.TrimSuffix(limit, "Mi"))
	if peak := peakRSS(t); err != nil || float64(mi)*1.048576 < 2*peak {
		t.Errorf("memory limit %q: want Mi at least twice the peak RSS BENCHMARKS.md measured (%.1f MB)", limit, peak)
	}

	// Flags, variables and secret files are the relay's and the manifests'.
	flags, envs := relayOptions(t)
	var args []string
	for _, a := range at(c, "args").([]any) {
		args = append(args, a.(string))
	}
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("container args %q: want run first", args)
	}
	set := checkRunArgs(t, "deployment.yaml", args[1:], flags)
	if lease, _ := at(docs["ConfigMap"][0], "data", "BINLOG_OUTBOX_LEASE").(string); strings.EqualFold(lease, "false") || strings.EqualFold(set["lease"], "false") {
		t.Error("two replicas without the lease: one of them would be fenced and exit")
	}
	mount, _ := at(c, "volumeMounts", 0, "mountPath").(string)
	secret := docs["Secret"][0]
	for _, f := range []string{"mysql-password-file", "redis-password-file"} {
		key, ok := strings.CutPrefix(set[f], mount+"/")
		if _, inSecret := at(secret, "stringData", key).(string); !ok || !inSecret {
			t.Errorf("--%s=%s: want a key of the Secret mounted at %s", f, set[f], mount)
		}
	}
	var names []string
	for k := range at(docs["ConfigMap"][0], "data").(map[string]any) {
		names = append(names, k)
	}
	checkEnvNames(t, "configmap.yaml", names, envs)
	if dsn, _ := at(docs["ConfigMap"][0], "data", "BINLOG_OUTBOX_MYSQL_DSN").(string); strings.Contains(strings.SplitN(dsn, "@", 2)[0], ":") {
		t.Errorf("configmap.yaml: the DSN %q has a password; it belongs in the Secret", dsn)
	}
	if port := at(c, "ports", 0, "containerPort"); set["metrics-addr"] != fmt.Sprintf(":%v", port) ||
		at(d, "spec", "template", "metadata", "annotations", "prometheus.io/port") != fmt.Sprint(port) {
		t.Errorf("--metrics-addr=%s, container port %v and the prometheus.io/port annotation differ", set["metrics-addr"], port)
	}

	// kustomization.yaml lists files that exist.
	var k struct{ Resources []string }
	if err := yaml.Unmarshal([]byte(readFile(t, "deploy", "kubernetes", "kustomization.yaml")), &k); err != nil {
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(repo(t, "deploy", "kubernetes", r)); err != nil {
			t.Errorf("kustomization.yaml: %v", err)
		}
	}
	if pm := docs["PodMonitor"]; len(pm) != 1 || at(pm[0], "spec", "jobLabel") != "app.kubernetes.io/name" {
		t.Errorf("podmonitor.yaml: want one PodMonitor whose jobLabel gives the job binlog-outbox the alerts expect")
	}
}
