package dotenv

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		content string
		env     map[string]string
		want    map[string]string
	}{
		{"plain", "A=1\nB=two\n", nil, map[string]string{"A": "1", "B": "two"}},
		{"a byte order mark at the start", "\uFEFFA=1\nB=two\n", nil, map[string]string{"A": "1", "B": "two"}},
		{"comments and blank lines", "# a comment\n\n  # indented\nA=1 # trailing\nB=x#y\n", nil, map[string]string{"A": "1", "B": "x"}},
		{"spaces around the equals", "A = 1\n  B=  2  \n", nil, map[string]string{"A": "1", "B": "2"}},
		{"export", "export DB_HOST=1\nexport\tLONGNAME=2\n", nil, map[string]string{"DB_HOST": "1", "LONGNAME": "2"}},
		{"empty values", "A=\nB=''\nC=\"\"\nD= # nothing\n", nil, map[string]string{"A": "", "B": "", "C": "", "D": ""}},
		{"single quotes are literal", `A='x y # $B ${B} \n'` + "\nB=1", nil, map[string]string{"A": `x y # $B ${B} \n`, "B": "1"}},
		{"double quotes", `A="x y # z"` + "\n" + `B="q\"uote \\ back \$ \n\t"`, nil, map[string]string{"A": "x y # z", "B": "q\"uote \\ back $ \n\t"}},
		{"comment after a quoted value", `A="x" # c` + "\n" + `B='y'#c`, nil, map[string]string{"A": "x", "B": "y"}},
		{"quotes inside an unquoted value", `A=a"b'c`, nil, map[string]string{"A": `a"b'c`}},
		{"interpolation of earlier keys", "H=db\nP=3306\nURL=${H}:${P}\nQ=\"${H}/x\"\nS='${H}'\n", nil,
			map[string]string{"H": "db", "P": "3306", "URL": "db:3306", "Q": "db/x", "S": "${H}"}},
		{"interpolation from the environment", "A=${HOME_DIR}/x\nB=${UNSET}\n", map[string]string{"HOME_DIR": "/home/app"},
			map[string]string{"A": "/home/app/x", "B": "${UNSET}"}},
		{"the file's earlier key wins over the environment", "A=file\nB=${A}", map[string]string{"A": "env"}, map[string]string{"A": "file", "B": "file"}},
		{"escaped dollar is not interpolated", "A=1\nB=\"\\${A}\"", nil, map[string]string{"A": "1", "B": "${A}"}},
		{"later entries replace earlier ones", "A=1\nA=2", nil, map[string]string{"A": "2"}},
		{"an entry without equals unsets", "A=1\nA\nB=2", nil, map[string]string{"B": "2"}},
		{"null stays the word null", "REDIS_PASSWORD=null", nil, map[string]string{"REDIS_PASSWORD": "null"}},
		{"multi-line double-quoted value", "KEY=\"-----BEGIN\nline2\n-----END\"\nB=2", nil, map[string]string{"KEY": "-----BEGIN\nline2\n-----END", "B": "2"}},
		{"CRLF and CR line ends", "A=1\r\nB=2\rC=3", nil, map[string]string{"A": "1", "B": "2", "C": "3"}},
		{"quoted names", `"A"=1` + "\n'B'=2", nil, map[string]string{"A": "1", "B": "2"}},
		// phpdotenv reads such names since 5.5 (Debian ships 5.4).
		{"unicode names", "É=1\nß.x_1=2", nil, map[string]string{"É": "1", "ß.x_1": "2"}},
		{"value with equals signs", "A=x=y==", nil, map[string]string{"A": "x=y=="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.content, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParse_Errors(t *testing.T) {
	const secret = "s3cr3t"
	tests := []struct {
		name, content string
		line          int
		key, reason   string
	}{
		{"unclosed double quote", "A=1\nDB_PASSWORD=\"" + secret, 2, "DB_PASSWORD", "a missing closing quote"},
		{"unclosed single quote", "DB_PASSWORD='" + secret + "\nB=1", 1, "DB_PASSWORD", "a missing closing quote"},
		{"unquoted value with a space", "\n\nDB_PASSWORD=" + secret + " more", 3, "DB_PASSWORD", "unexpected whitespace"},
		{"bad escape", `DB_PASSWORD="` + secret + `\q"`, 1, "DB_PASSWORD", "an unexpected escape sequence"},
		{"text after a closing quote", `DB_PASSWORD="` + secret + `"x`, 1, "DB_PASSWORD", "unexpected whitespace"},
		{"no name", "=" + secret, 1, "", "an unexpected equals"},
		{"invalid name", "DB-PASSWORD=" + secret, 1, "", "an invalid name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.content, nil)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse: %v, want a *SyntaxError", err)
			}
			if se.Line != tt.line || se.Key != tt.key || !strings.Contains(se.Reason, tt.reason) {
				t.Errorf("got line %d key %q reason %q, want line %d key %q reason %q", se.Line, se.Key, se.Reason, tt.line, tt.key, tt.reason)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error %q shows the value", err)
			}
		})
	}
}

// quoteDouble writes v as a double-quoted .env value.
func quoteDouble(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "\f", `\f`, "\v", `\v`)
	return `"` + r.Replace(v) + `"`
}

// FuzzParse: any content either parses or fails with a SyntaxError that
// does not quote it; never a panic. Every name it returns is a valid one.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"A=1\n# c\nexport B='x'\nC=\"${A}\\n\"", "A=\"multi\nline\"", "A=${A}${", "=", "export  X=1", "'A'=\"",
		"A=\"\\", "A='", "A=1 2", "A=$${B}", "B=1\nA=${B}${B}}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		vars, err := Parse(content, nil)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Line < 1 {
				t.Fatalf("error %v (%T), want a *SyntaxError with a line", err, err)
			}
			return
		}
		for k := range vars {
			if !validName(k) {
				t.Errorf("name %q is not valid", k)
			}
		}
	})
}

// FuzzParse_DoubleQuotedRoundTrip: a value written double-quoted with
// escapes reads back as itself.
func FuzzParse_DoubleQuotedRoundTrip(f *testing.F) {
	for _, s := range []string{"", "plain", "p@ss w#rd", `q"uote\`, "${A}", "line\nbreak\ttab", "'", "null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		vars, err := Parse("A=x\nK="+quoteDouble(v)+" # comment\n", nil)
		if err != nil {
			t.Fatalf("Parse of %q: %v", quoteDouble(v), err)
		}
		if vars["K"] != v {
			t.Errorf("read back %q, wrote %q", vars["K"], v)
		}
	})
}
