package preflight

import (
	"strings"

	"github.com/binlog-outbox/binlog-outbox/internal/sqlscan"
)

// grant is one line of SHOW GRANTS that grants privileges (not a role, not a
// proxy), reduced to what the preflight needs: the privileges and whether they
// are global. Table privileges are proven by running statements instead, which
// also covers grants through roles and wildcard database patterns.
type grant struct {
	// privs are upper case with single spaces and without column lists;
	// "ALL PRIVILEGES" is "ALL".
	privs []string
	// global is true for ON *.*.
	global bool
}

// grants is the parsed output of SHOW GRANTS.
type grants []grant

// parseGrants parses SHOW GRANTS lines of MySQL 8 and MariaDB 10/11, skipping
// lines it does not understand (role grants, PROXY, SET DEFAULT ROLE, routine
// grants): a preflight must not fail on a grant syntax a newer server adds.
func parseGrants(lines []string) grants {
	var gs grants
	for _, l := range lines {
		if g, ok := parseGrant(l); ok {
			gs = append(gs, g)
		}
	}
	return gs
}

// parseGrant parses "GRANT <privs> ON <object> TO <grantee> [...]".
func parseGrant(line string) (grant, bool) {
	line = strings.TrimSpace(line)
	if len(line) < 6 || !strings.EqualFold(line[:6], "GRANT ") {
		return grant{}, false
	}
	rest := line[6:]
	on := indexKeyword(rest, "ON")
	if on < 0 {
		return grant{}, false // a role grant: GRANT `r`@`%` TO `u`@`%`
	}
	to := indexKeyword(rest[on:], "TO")
	if to < 0 {
		return grant{}, false
	}
	object := strings.TrimSpace(rest[on+len(" ON ") : on+to])
	if object == "" || strings.HasPrefix(object, "'") || strings.HasPrefix(object, "`@") || strings.HasPrefix(object, "``") {
		return grant{}, false // GRANT PROXY ON ''@'%'
	}
	if kw, tail, ok := strings.Cut(object, " "); ok {
		switch strings.ToUpper(kw) {
		case "TABLE":
			object = strings.TrimSpace(tail)
		case "FUNCTION", "PROCEDURE", "PACKAGE":
			return grant{}, false // routine privileges
		}
	}
	var g grant
	for _, p := range splitTopLevel(rest[:on]) {
		if i := strings.IndexByte(p, '('); i >= 0 {
			p = p[:i] // SELECT (`a`, `b`): a column privilege is still the privilege
		}
		p = strings.ToUpper(strings.Join(strings.Fields(p), " "))
		switch p {
		case "":
			continue
		case "ALL PRIVILEGES":
			p = "ALL"
		}
		g.privs = append(g.privs, p)
	}
	g.global = object == "*.*"
	return g, len(g.privs) > 0
}

// hasGlobal reports whether any global grant holds one of privs, or ALL.
func (gs grants) hasGlobal(privs ...string) bool {
	for _, g := range gs {
		if !g.global {
			continue
		}
		for _, p := range g.privs {
			if p == "ALL" {
				return true
			}
			for _, want := range privs {
				if p == want {
					return true
				}
			}
		}
	}
	return false
}

// Privilege names as SHOW GRANTS prints them, with the aliases that grant the
// same right.
var (
	// privReplicationSlave lets a client register as a replica and dump the
	// binlog. MariaDB 10.5 accepts REPLICATION REPLICA as a synonym.
	privReplicationSlave = []string{"REPLICATION SLAVE", "REPLICATION REPLICA"}
	// privReplicationClient lets a client read binlog coordinates. MariaDB
	// 10.5.2 renamed it BINLOG MONITOR (and prints that name); SUPER covered
	// it on both flavors before the split.
	privReplicationClient = []string{"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}
)

// indexKeyword returns the index of " KW " in s outside quotes, backticks and
// parentheses, or -1. The index points at the leading space.
func indexKeyword(s, kw string) int {
	found := -1
	sqlscan.TopLevel(s, func(i int) bool {
		end := i + 1 + len(kw)
		if s[i] == ' ' && end < len(s) && s[end] == ' ' && strings.EqualFold(s[i+1:end], kw) {
			found = i
			return false
		}
		return true
	})
	return found
}

// splitTopLevel splits a privilege list at commas outside parentheses and
// quotes; MySQL 8 prints dynamic privileges without a space after the comma.
func splitTopLevel(s string) []string {
	var parts []string
	start := 0
	sqlscan.TopLevel(s, func(i int) bool {
		if s[i] == ',' {
			parts = append(parts, s[start:i])
			start = i + 1
		}
		return true
	})
	return append(parts, s[start:])
}

// quoteAccount turns CURRENT_USER()'s "user@host" into 'user'@'host' for the
// GRANT statements the fixes suggest. The host is after the last '@' because a
// user name may contain one.
func quoteAccount(current string) string {
	if current == "" {
		return "<relay user>"
	}
	user, host := current, "%"
	if i := strings.LastIndex(current, "@"); i >= 0 {
		user, host = current[:i], current[i+1:]
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return q(user) + "@" + q(host)
}
