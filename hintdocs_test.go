package outbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsRef matches a docs page that a message of the code names.
var docsRef = regexp.MustCompile(`docs/[a-z0-9-]+\.md`)

// TestHints_NameThePageWithTheContent: every docs page that a message of the
// code (a hint, a usage text) names exists, and none is an index page, whose
// reader would still have to find the page that says what to do (issue 41:
// five hints sent readers to docs/operations.md).
func TestHints_NameThePageWithTheContent(t *testing.T) {
	index := map[string]bool{"docs/operations.md": true}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, ref := range docsRef.FindAllString(line, -1) {
				if _, err := os.Stat(ref); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", path, i+1, ref)
				} else if index[ref] {
					t.Errorf("%s:%d sends the reader to the index %s; name the page that holds the content", path, i+1, ref)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
