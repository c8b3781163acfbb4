package outbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	// mdLink matches an inline Markdown link or image and captures its target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// mdCode matches an inline code span, whose brackets are not links.
	mdCode = regexp.MustCompile("`[^`]*`")
	// slugDrop is what GitHub leaves out of a heading's anchor.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	// htmlAnchor matches an anchor set by hand, <a id="x"></a> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

// TestDocs_RelativeLinksResolve fails on a link between the repository's
// Markdown pages that leads nowhere: a page that moved, or a heading that was
// renamed. Splitting pages is when such links break, and a reader who follows
// one lands on a 404 or the top of the wrong page.
func TestDocs_RelativeLinksResolve(t *testing.T) {
	pages := map[string][]string{} // page -> its lines outside code blocks
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			pages[path] = proseLines(string(raw))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 2 {
		t.Fatalf("found %d Markdown pages; run the test from the module root", len(pages))
	}
	for page, lines := range pages {
		for n, line := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(mdCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", page, n+1, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				destLines, ok := pages[filepath.Clean(dest)]
				if !ok {
					continue
				}
				if !hasAnchor(destLines, anchor) {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", page, n+1, target, dest, anchor)
				}
			}
		}
	}
}

// proseLines returns the lines of a Markdown page with fenced code blocks
// blanked, so that numbering stays that of the file.
func proseLines(page string) []string {
	lines := strings.Split(page, "\n")
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// hasAnchor reports whether one of the page's headings gets the anchor as
// GitHub renders it: lowercase, punctuation dropped, spaces as hyphens, a
// repeated heading numbered -1, -2, ...
func hasAnchor(lines []string, anchor string) bool {
	seen := map[string]int{}
	for _, l := range lines {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			if m[1] == anchor {
				return true
			}
		}
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || strings.TrimSpace(title) == "" {
			continue
		}
		title = strings.TrimSpace(title)
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		if k := seen[slug]; k > 0 {
			seen[slug] = k + 1
			slug += "-" + strconv.Itoa(k)
		} else {
			seen[slug] = 1
		}
		if slug == anchor {
			return true
		}
	}
	return false
}

// mdTestName matches a Go test, benchmark or fuzz target named in a page's
// code span, e.g. `TestRun_MillionRowTransaction` or `TestSink_*`.
var mdTestName = regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)(\\*?)`")

// TestDocs_NamedTestsExist fails when a page names a test that no longer
// exists: TESTING.md and BENCHMARKS.md say which test shows each behaviour,
// and a renamed test would leave the reader looking for evidence that is gone.
func TestDocs_NamedTestsExist(t *testing.T) {
	var sources strings.Builder
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	code := sources.String()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, more...) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(raw), "\n") {
			for _, m := range mdTestName.FindAllStringSubmatch(line, -1) {
				decl := "func " + m[1]
				if m[2] == "" {
					decl += "("
				}
				if !strings.Contains(code, decl) {
					t.Errorf("%s:%d names %s%s, which no _test.go file declares", page, n+1, m[1], m[2])
				}
			}
		}
	}
}
