package examples_test

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
)

// debianLaravel is where php-laravel-framework puts the framework; the
// example's bootstrap/autoload.php falls back to it without vendor/.
const debianLaravel = "/usr/share/php/Illuminate/Foundation/Application.php"

// requireLaravel fails, never skips, when the PHP that runs the examples
// (the machine's, or a Debian 13 tree's: TESTING.md) has no Debian Laravel,
// and logs the version it has: the suite runs on more than one.
func requireLaravel(t *testing.T, php string) {
	t.Helper()
	// The file's VERSION constant, read without loading the framework.
	script := `$f = @file_get_contents('` + debianLaravel + `');
if ($f === false || !preg_match("/const VERSION = '([^']+)'/", $f, $m)) exit(1);
echo 'PHP ', PHP_VERSION, ', Laravel ', $m[1];`
	out, err := exec.Command(php, "-r", script).CombinedOutput()
	if err != nil {
		t.Fatalf("Laravel is not installed (%v %s); install it with: apt-get install -y php-laravel-framework (scripts/test.sh installs it)", err, out)
	}
	t.Logf("PHP and Laravel: %s", out)
}

// checkLaravelEvent checks what the package's Outbox::record wrote, as the relay relayed it:
// the JSON casts, the microseconds of occurred_at, a ULID message id.
func checkLaravelEvent(t *testing.T, v map[string]any) {
	t.Helper()
	var payload struct {
		OrderID    int    `json:"order_id"`
		Customer   string `json:"customer"`
		TotalCents int    `json:"total_cents"`
	}
	if err := json.Unmarshal([]byte(v["payload"].(string)), &payload); err != nil || payload.OrderID == 0 || payload.Customer == "" {
		t.Errorf("first entry's payload %q (%v), want the order as a JSON object", v["payload"], err)
	}
	if id := v["message_id"].(string); !ulidRE.MatchString(id) || time.Since(ulidTime(id)).Abs() > 5*time.Minute {
		t.Errorf("message_id %q is not a ULID of about now", id)
	}
	at, err := time.Parse(time.RFC3339Nano, v["occurred_at"].(string))
	if err != nil || time.Since(at).Abs() > 5*time.Minute {
		t.Errorf("occurred_at %q (%v), want about now in UTC", v["occurred_at"], err)
	}
	if v["aggregate_id"] != strconv.Itoa(payload.OrderID) || v["event_type"] != "order.placed" {
		t.Errorf("first entry %v, want order.placed of order %d", v, payload.OrderID)
	}
}

// artisan runs examples/laravel's artisan with the Env's settings in the
// environment variables config/*.php read.
type artisan struct {
	php *phpRunner
	bin string
}

func newArtisan(t *testing.T, php string, e *exampletest.Env) *artisan {
	host, port, db := exampletest.RedisAddr(t, e)
	cache := t.TempDir()
	env := append(os.Environ(),
		"DB_HOST="+e.MariaDB.Host(), "DB_PORT="+strconv.Itoa(e.MariaDB.Port()), "DB_DATABASE="+e.Database,
		"DB_USERNAME="+e.MariaDB.User(), "DB_PASSWORD="+e.MariaDB.Password(),
		"REDIS_HOST="+host, "REDIS_PORT="+port, "REDIS_DB="+db,
		"LOG_CHANNEL=stderr",
		// Laravel writes its manifests here, not into the checkout.
		"APP_PACKAGES_CACHE="+filepath.Join(cache, "packages.php"), "APP_SERVICES_CACHE="+filepath.Join(cache, "services.php"))
	return &artisan{php: &phpRunner{t: t, php: php, env: env}, bin: repo(t, "examples", "laravel", "artisan")}
}

func (a *artisan) command(args ...string) *exec.Cmd {
	return a.php.command(append([]string{a.bin}, args...)...)
}

func (a *artisan) run(args ...string) string {
	a.php.t.Helper()
	return a.php.run(append([]string{a.bin}, args...)...)
}

// TestComposerJSON checks what Composer would do with the files the suite
// does not install from (no Packagist here): the Laravel app requires
// Laravel 10 to 12, the package binlog-outbox/laravel and the consumer
// library through their path repositories, the package is discovered by
// Laravel, and every class sits where its PSR-4 entry makes Composer look
// for it.
func TestComposerJSON(t *testing.T) {
	type composer struct {
		Name         string            `json:"name"`
		Require      map[string]string `json:"require"`
		Repositories []struct {
			Type, URL string
		} `json:"repositories"`
		Autoload struct {
			PSR4 map[string]string `json:"psr-4"`
		} `json:"autoload"`
		Extra struct {
			Laravel struct {
				Providers []string `json:"providers"`
			} `json:"laravel"`
		} `json:"extra"`
	}
	read := func(dir string) composer {
		t.Helper()
		var c composer
		if err := json.Unmarshal([]byte(readFile(t, dir, "composer.json")), &c); err != nil {
			t.Fatalf("%s/composer.json: %v", dir, err)
		}
		return c
	}
	app, lib, pkg := read("examples/laravel"), read("examples/php/lib"), read("integrations/laravel")
	if got := app.Require["laravel/framework"]; got != "^10.0|^11.0|^12.0|^13.0" {
		t.Errorf("examples/laravel requires laravel/framework %q, want ^10.0|^11.0|^12.0|^13.0", got)
	}
	var paths []string
	for _, r := range app.Repositories {
		if r.Type == "path" {
			paths = append(paths, filepath.Clean(filepath.Join("examples/laravel", r.URL)))
		}
	}
	if !slices.Equal(paths, []string{"integrations/laravel"}) {
		t.Errorf("examples/laravel's path repositories %v, want integrations/laravel: the package's queue driver consumes, not a copy of examples/php/lib", paths)
	}
	if _, ok := app.Require[pkg.Name]; !ok || pkg.Name == "" {
		t.Errorf("examples/laravel does not require the package %q of its path repository", pkg.Name)
	}
	if _, ok := app.Require[lib.Name]; ok {
		t.Errorf("examples/laravel requires %s; the package's queue driver is its consumer", lib.Name)
	}
	for _, dep := range []string{"illuminate/support", "illuminate/database", "illuminate/queue"} {
		if got := pkg.Require[dep]; got != "^8.0|^9.0|^10.0|^11.0|^12.0|^13.0" {
			t.Errorf("integrations/laravel requires %s %q, want ^8.0|^9.0|^10.0|^11.0|^12.0|^13.0", dep, got)
		}
	}
	if want := []string{`BinlogOutbox\Laravel\OutboxServiceProvider`}; !slices.Equal(pkg.Extra.Laravel.Providers, want) {
		t.Errorf("integrations/laravel's extra.laravel.providers %v, want %v", pkg.Extra.Laravel.Providers, want)
	}
	checkPSR4(t, "examples/laravel", app.Autoload.PSR4)
	checkPSR4(t, "examples/php/lib", lib.Autoload.PSR4)
	checkPSR4(t, "integrations/laravel", pkg.Autoload.PSR4)
}

// TestComposerValidate runs Debian's composer on the package's composer.json:
// a package Composer refuses installs nowhere.
func TestComposerValidate(t *testing.T) {
	composer, err := exec.LookPath("composer")
	if err != nil {
		t.Fatalf("composer not found in PATH (%v); install it with: apt-get install -y composer", err)
	}
	cmd := exec.Command(composer, "validate", "--no-interaction", "--no-check-publish")
	cmd.Dir = repo(t, "integrations", "laravel")
	cmd.Env = append(os.Environ(), "COMPOSER_HOME="+t.TempDir(), "COMPOSER_NO_AUDIT=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("composer validate in integrations/laravel: %v\n%s", err, out)
	}
}

var namespaceRE = regexp.MustCompile(`(?m)^namespace ([A-Za-z0-9_\\]+);$`)

// checkPSR4 checks that each PHP file under a PSR-4 directory declares the
// namespace its path gives (tests/ and scripts without a namespace aside).
func checkPSR4(t *testing.T, dir string, psr4 map[string]string) {
	t.Helper()
	if len(psr4) == 0 {
		t.Fatalf("%s/composer.json has no PSR-4 autoload", dir)
	}
	for prefix, sub := range psr4 {
		root := repo(t, dir, sub)
		classes := 0
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() && d.Name() == "tests" {
				return cmp.Or(err, filepath.SkipDir)
			}
			if !strings.HasSuffix(p, ".php") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m := namespaceRE.FindSubmatch(b)
			if m == nil {
				return nil // autoload.php and the like
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			want := strings.TrimSuffix(prefix, `\`)
			if rel != "." {
				want += `\` + strings.ReplaceAll(rel, "/", `\`)
			}
			if string(m[1]) != want {
				t.Errorf("%s declares namespace %s; PSR-4 (%s => %s) wants %s", p, m[1], prefix, sub, want)
			}
			class := strings.TrimSuffix(filepath.Base(p), ".php")
			if !regexp.MustCompile(`(?m)^(final |abstract )?(class|interface|trait) ` + class + `\b`).Match(b) {
				t.Errorf("%s does not declare %s, the name PSR-4 looks it up by", p, class)
			}
			classes++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if classes == 0 {
			t.Errorf("no class under %s (PSR-4 %s)", root, prefix)
		}
	}
}

// TestLaravelPackage_Record runs integrations/laravel/tests/record.php in
// examples/laravel on Debian's Laravel (8 or 10): Outbox::record outside a
// transaction is refused; inside one its row commits or rolls back with the
// transaction, nested transactions (savepoints) included; the Eloquent trait
// records with the model as the aggregate. The outbox table then holds
// exactly the committed events, with their schema version and headers.
func TestLaravelPackage_Record(t *testing.T) {
	php := requirePHP(t)
	requireLaravel(t, php)
	e := exampletest.NewBareEnv(t)
	art := newArtisan(t, php, e)
	art.run("migrate", "--force")

	var got struct {
		Committed  []string `json:"committed"`
		RolledBack []string `json:"rolled_back"`
		Refused    bool     `json:"refused"`
	}
	out := art.php.run(repo(t, "integrations", "laravel", "tests", "record.php"), repo(t, "examples", "laravel"))
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("record.php printed %q: %v", out, err)
	}
	if !got.Refused {
		t.Error("Outbox::record outside a transaction was not refused")
	}
	if len(got.Committed) != 4 || len(got.RolledBack) != 4 {
		t.Fatalf("record.php committed %d events and rolled back %d, want 4 and 4: %s", len(got.Committed), len(got.RolledBack), out)
	}

	type row struct {
		aggregateType, aggregateID, eventType string
		schemaVersion                         sql.NullInt64
		headers                               sql.NullString
	}
	rows, err := e.DB.Query("SELECT message_id, aggregate_type, aggregate_id, event_type, schema_version, headers FROM outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := map[string]row{}
	var order []string
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.aggregateType, &r.aggregateID, &r.eventType, &r.schemaVersion, &r.headers); err != nil {
			t.Fatal(err)
		}
		if !ulidRE.MatchString(id) {
			t.Errorf("message_id %q is not a ULID", id)
		}
		stored[id] = r
		order = append(order, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, got.Committed) {
		t.Errorf("the outbox table holds %v, want the committed events %v and none of the rolled-back %v", order, got.Committed, got.RolledBack)
	}
	first := stored[got.Committed[0]]
	if first.eventType != "order.placed" || first.aggregateID != "2" || first.schemaVersion.Int64 != 3 || !strings.Contains(first.headers.String, `"trace-2"`) {
		t.Errorf("the first committed event is %+v, want order.placed of order 2 with schema version 3 and trace_id trace-2", first)
	}
	if r := stored[got.Committed[1]]; r.schemaVersion.Valid || r.headers.Valid {
		t.Errorf("an event recorded without schema version and headers has %+v, want both NULL", r)
	}
	if last := stored[got.Committed[3]]; last.aggregateType != "order" || last.eventType != "order.placed" {
		t.Errorf("the trait's event is %+v, want order.placed of aggregate type order", last)
	}
}
