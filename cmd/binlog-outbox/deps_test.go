package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestBinary_LinksNoTestKit: the relay's binary links neither the test kit
// (testkit/...: server launchers, the conformance suite) nor the benchmark,
// which starts servers with it; both live beside the product, not in it.
func TestBinary_LinksNoTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list -deps: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/binlog-outbox/binlog-outbox/"
	var deps int
	for _, pkg := range strings.Fields(string(out)) {
		rel, ours := strings.CutPrefix(pkg, module)
		if !ours {
			continue
		}
		deps++
		if rel == "testkit" || strings.HasPrefix(rel, "testkit/") || rel == "bench" || strings.HasPrefix(rel, "bench/") {
			t.Errorf("the binary links %s", pkg)
		}
	}
	if deps < 5 {
		t.Fatalf("go list -deps named %d packages of this module, want the relay's (at least 5):\n%s", deps, out)
	}
}
