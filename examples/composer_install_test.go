package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestComposerInstall_PathRepository installs binlog-outbox/laravel into a
// bare Laravel application the way docs/laravel.md tells a shop to: Composer
// from a path repository (Packagist is switched off, and the framework is
// "provided" by Debian's Laravel, 8 or 10). Laravel must then discover the package
// from what Composer wrote, without the application listing its provider,
// and publish its config file and migration.
func TestComposerInstall_PathRepository(t *testing.T) {
	composer, err := exec.LookPath("composer")
	if err != nil {
		t.Fatalf("composer not found in PATH (%v); install it with: apt-get install -y composer", err)
	}
	php := requirePHP(t)
	app := t.TempDir()
	copyDir(t, repo(t, "examples", "testdata", "laravel-app"), app)
	manifest := strings.Replace(readFile(t, "examples", "testdata", "laravel-app", "composer.json"),
		`"PACKAGE"`, `"`+repo(t, "integrations", "laravel")+`"`, 1)
	if err := os.WriteFile(filepath.Join(app, "composer.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"bootstrap/cache", "storage/framework", "database"} {
		if err := os.MkdirAll(filepath.Join(app, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = app
		cmd.Env = append(os.Environ(), "COMPOSER_HOME="+t.TempDir(), "COMPOSER_NO_AUDIT=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(composer, "install", "--no-interaction", "--no-progress")
	if out := run(php, "artisan", "package:discover"); !strings.Contains(out, "binlog-outbox/laravel") {
		t.Fatalf("package:discover did not discover binlog-outbox/laravel:\n%s", out)
	}
	run(php, "artisan", "vendor:publish", "--tag=outbox-config")
	run(php, "artisan", "vendor:publish", "--tag=outbox-migrations")
	for _, file := range []string{"config/outbox.php", "database/migrations/2024_01_01_000000_create_outbox_table.php"} {
		if _, err := os.Stat(filepath.Join(app, file)); err != nil {
			t.Errorf("after vendor:publish the application has no %s: %v", file, err)
		}
	}
}

// copyDir copies the regular files of a tree.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", from, err)
	}
}
