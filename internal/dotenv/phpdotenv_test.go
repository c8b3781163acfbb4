package dotenv

import (
	"encoding/json"
	"maps"
	"os/exec"
	"strings"
	"testing"
)

// phpdotenvAutoload is where Debian's php-vlucas-phpdotenv (Laravel's .env
// loader) installs.
const phpdotenvAutoload = "/usr/share/php/Dotenv/autoload.php"

// phpParse reads each content as phpdotenv reads a file (Reader's
// Str::utf8, which drops a byte order mark, then Dotenv::parse), in one PHP
// process: nil for a content it refuses, its variables otherwise (names it
// clears left out, as Parse leaves them out).
const phpParse = `<?php
require '` + phpdotenvAutoload + `';
$out = [];
foreach (json_decode(stream_get_contents(STDIN), true) as $content) {
    try {
        $content = Dotenv\Util\Str::utf8($content)->success()->get();
        $vars = array_filter(Dotenv\Dotenv::parse($content), fn($v) => $v !== null);
        $out[] = (object) $vars;
    } catch (Dotenv\Exception\InvalidFileException $e) {
        $out[] = null;
    }
}
echo json_encode($out);
`

// TestParse_AgreesWithPHPDotenv reads the same files with Parse and with
// phpdotenv itself: both refuse a file, or both read the same variables.
func TestParse_AgreesWithPHPDotenv(t *testing.T) {
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatal("php not found in PATH; install it with: apt-get install -y php-cli php-vlucas-phpdotenv (scripts/test.sh installs them)")
	}
	// Asked of that PHP, which may be a Debian 13 tree's (TESTING.md).
	if out, err := exec.Command(php, "-r", "exit(is_file('"+phpdotenvAutoload+"') ? 0 : 1);").CombinedOutput(); err != nil {
		t.Fatalf("phpdotenv is not installed (%v %s); install it with: apt-get install -y php-vlucas-phpdotenv (scripts/test.sh installs it)", err, out)
	}
	contents := []string{
		"APP_NAME=Laravel\nAPP_ENV=local\nAPP_KEY=base64:abc+/=\nAPP_DEBUG=true\nAPP_URL=http://localhost\n",
		"DB_CONNECTION=mysql\nDB_HOST=127.0.0.1\nDB_PORT=3306\nDB_DATABASE=laravel\nDB_USERNAME=root\nDB_PASSWORD=\n",
		"REDIS_HOST=127.0.0.1\nREDIS_PASSWORD=null\nREDIS_PORT=6379\n",
		"MAIL_FROM_ADDRESS=\"hello@example.com\"\nMAIL_FROM_NAME=\"${APP_NAME}\"\nAPP_NAME=x\nVITE_APP_NAME=\"${APP_NAME}\"\n",
		"export DB_HOST=db\nexport\tDB_PORT=3307\nexport A=1\n",
		"# c\n  # c\n\nA=1 # c\nB=x#y\nC= # c\nD=\nE=''\nF=\"\"\n",
		`A='x y # $B ${B} \n'` + "\n" + `B="q\"uote \\ back \$ \n\t \f \v"`,
		"A=a\"b'c\nB=x=y==\n\"C\"=1\n'D'=2\n",
		"H=db\nURL=${H}:${P}\nP=1\nQ=\"${H}/x\"\nS='${H}'\nT=$${H}\nU=${H}${H}}\nV=\\${H}\nW=\"\\${H}\"\n",
		"KEY=\"-----BEGIN\nline2\n  line3\n-----END\"\nB=2\n",
		"A=1\r\nB=2\rC=3\r\n",
		"A=1\nA\nB=2\nC=1\nC=2\n",
		"A=1 2", "A='x", "A=\"x\\q\"", "A=\"x\"y", "=x", "A-B=1", "A B=1", " =1",
		"A=\"x\ny\" z\nB=1", "A=  \"x\"  ", "A=\"\\\"\"", "A=\"\\\\\"", "A=${", "A=${}", "A=${ B}",
		"A=1\nB=${A}\nA=2\nC=${A}", "export  APP=1", "A=#x", "A='#x'", "A=\"#x\"",
		"A=$", "A=$$", "A=${A}", "A=(x)", "A=x\\y", "A='x'#", "A=\"\n\"", "A=\"\"\"",
		// A byte order mark at the start is dropped, elsewhere it is part
		// of a name or a value.
		"\uFEFFA=1\nB=2\n", "\uFEFF# c\nA=1", "A=1\n\uFEFFB=2\n", "A=\uFEFF1", "\uFEFF\uFEFFA=1",
	}
	in, err := json.Marshal(contents)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(php, "-r", strings.TrimPrefix(phpParse, "<?php\n"))
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	var want []map[string]string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("php output %q: %v", out, err)
	}
	if len(want) != len(contents) {
		t.Fatalf("php read %d contents, want %d", len(want), len(contents))
	}
	// Where Parse is stricter on purpose: phpdotenv drops a double-quoted
	// value that is never closed, and every entry after it, without a word;
	// the relay refuses the file instead of connecting without them.
	for _, content := range []string{"A=\"x", "A=1\nB=\"x\nC=2\n"} {
		if _, err := Parse(content, nil); err == nil {
			t.Errorf("%q: read, want an error for the unclosed quote", content)
		}
	}
	for i, content := range contents {
		got, err := Parse(content, nil)
		switch {
		case want[i] == nil && err == nil:
			t.Errorf("%q: read %q, phpdotenv refuses it", content, got)
		case want[i] != nil && err != nil:
			t.Errorf("%q: %v, phpdotenv reads %q", content, err, want[i])
		case err == nil && !maps.Equal(got, want[i]):
			t.Errorf("%q: read %q, phpdotenv reads %q", content, got, want[i])
		}
	}
}
