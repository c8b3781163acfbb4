package preflight

import (
	"slices"
	"testing"
)

func TestParseGrant(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		ok     bool
		privs  []string
		global bool
	}{
		{"mariadb all", "GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION", true, []string{"ALL"}, true},
		{"mariadb replication", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `relay`@`%` IDENTIFIED BY PASSWORD '*B69027D44F6E5EDC07F1AEAD1477967B16F28227'", true, []string{"REPLICATION SLAVE", "BINLOG MONITOR"}, true},
		{"mariadb usage", "GRANT USAGE ON *.* TO `u`@`%` IDENTIFIED BY PASSWORD '*0'", true, []string{"USAGE"}, true},
		{"mariadb table", "GRANT SELECT, UPDATE ON `app`.`outbox` TO `u`@`%`", true, []string{"SELECT", "UPDATE"}, false},
		{"mariadb role privileges", "GRANT REPLICATION SLAVE ON *.* TO `relay_role`", true, []string{"REPLICATION SLAVE"}, true},
		{"role grant", "GRANT `relay_role` TO `u`@`%`", false, nil, false},
		{"mysql role grant", "GRANT `relay_role`@`%` TO `u`@`%`", false, nil, false},
		{"proxy", "GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION", false, nil, false},
		{"mariadb proxy backticks", "GRANT PROXY ON ``@`%` TO `root`@`127.0.0.1` WITH GRANT OPTION", false, nil, false},
		{"set default role", "SET DEFAULT ROLE `r` FOR `u`@`%`", false, nil, false},
		{"routine", "GRANT EXECUTE ON PROCEDURE `app`.`p` TO `u`@`%`", false, nil, false},
		{"table keyword", "GRANT SELECT ON TABLE `app`.`outbox` TO `u`@`%`", true, []string{"SELECT"}, false},
		{"columns", "GRANT SELECT (`id`, `payload`), UPDATE (`sent_at`) ON `app`.`outbox` TO `u`@`%`", true, []string{"SELECT", "UPDATE"}, false},
		{"mysql 8 static", "GRANT SELECT, RELOAD, PROCESS, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`", true, []string{"SELECT", "RELOAD", "PROCESS", "REPLICATION SLAVE", "REPLICATION CLIENT"}, true},
		{"mysql 8 dynamic", "GRANT APPLICATION_PASSWORD_ADMIN,AUDIT_ABORT_EXEMPT,BACKUP_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `root`@`localhost` WITH GRANT OPTION", true, []string{"APPLICATION_PASSWORD_ADMIN", "AUDIT_ABORT_EXEMPT", "BACKUP_ADMIN", "REPLICATION_SLAVE_ADMIN"}, true},
		{"mysql 5.7 style quotes", "GRANT REPLICATION SLAVE ON *.* TO 'relay'@'%'", true, []string{"REPLICATION SLAVE"}, true},
		{"database level", "GRANT ALL PRIVILEGES ON `app\\_db`.* TO `u`@`%`", true, []string{"ALL"}, false},
		{"lower case", "grant replication slave on *.* to `u`@`%`", true, []string{"REPLICATION SLAVE"}, true},
		{"name containing ON", "GRANT SELECT ON `x ON y`.`t` TO `u`@`%`", true, []string{"SELECT"}, false},
		{"not a grant", "REVOKE SELECT ON *.* FROM `u`@`%`", false, nil, false},
		{"empty", "", false, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok := parseGrant(tt.line)
			if ok != tt.ok {
				t.Fatalf("parseGrant(%q) ok = %v, want %v (got %+v)", tt.line, ok, tt.ok, g)
			}
			if !ok {
				return
			}
			if !slices.Equal(g.privs, tt.privs) || g.global != tt.global {
				t.Errorf("parseGrant(%q) = %q global=%v, want %q global=%v", tt.line, g.privs, g.global, tt.privs, tt.global)
			}
		})
	}
}

func TestGrants_HasGlobal(t *testing.T) {
	tests := []struct {
		name       string
		lines      []string
		slave, cli bool
	}{
		{"mariadb split privileges", []string{"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `relay`@`%`"}, true, true},
		{"mysql", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`"}, true, true},
		{"all on *.*", []string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}, true, true},
		{"all on database only", []string{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `app`.* TO `u`@`%`"}, false, false},
		{"slave only", []string{"GRANT REPLICATION SLAVE ON *.* TO `u`@`%`"}, true, false},
		{"client only", []string{"GRANT REPLICATION CLIENT ON *.* TO `u`@`%`"}, false, true},
		{"admin is not slave", []string{"GRANT REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, SLAVE MONITOR ON *.* TO `u`@`%`"}, false, false},
		{"mysql dynamic admin is not slave", []string{"GRANT REPLICATION_SLAVE_ADMIN ON *.* TO `u`@`%`"}, false, false},
		{"super", []string{"GRANT SUPER ON *.* TO `u`@`%`"}, false, true},
		{"through active role", []string{"GRANT `r` TO `u`@`%`", "GRANT USAGE ON *.* TO `u`@`%`", "GRANT REPLICATION SLAVE ON *.* TO `r`", "SET DEFAULT ROLE `r` FOR `u`@`%`"}, true, false},
		{"nothing", []string{"GRANT USAGE ON *.* TO `u`@`%`"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := parseGrants(tt.lines)
			if got := gs.hasGlobal(privReplicationSlave...); got != tt.slave {
				t.Errorf("REPLICATION SLAVE = %v, want %v", got, tt.slave)
			}
			if got := gs.hasGlobal(privReplicationClient...); got != tt.cli {
				t.Errorf("REPLICATION CLIENT = %v, want %v", got, tt.cli)
			}
		})
	}
}

func TestQuoteAccount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"relay@%", "'relay'@'%'"},
		{"root@127.0.0.1", "'root'@'127.0.0.1'"},
		{"we@ird@host", "'we@ird'@'host'"},
		{"o'neil@%", "'o''neil'@'%'"},
		{"", "<relay user>"},
	}
	for _, tt := range tests {
		if got := quoteAccount(tt.in); got != tt.want {
			t.Errorf("quoteAccount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
