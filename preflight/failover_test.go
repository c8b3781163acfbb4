package preflight

import (
	"errors"
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/mysqlserver"
	"github.com/binlog-outbox/binlog-outbox/position"
)

func TestCheckFailover(t *testing.T) {
	const uuidOld, uuidNew = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "5c2bd8e4-0b4f-11ef-8a1d-0242ac120003"
	maria := func(id uint32) mysqlserver.Server {
		return mysqlserver.Server{Flavor: mysqlserver.FlavorMariaDB, ServerID: id}
	}
	my := func(id uint32, uuid string) mysqlserver.Server {
		return mysqlserver.Server{Flavor: mysqlserver.FlavorMySQL, ServerID: id, ServerUUID: uuid}
	}
	filePos := func(flavor string, id uint32, uuid string) []byte {
		return position.Binlog{Flavor: flavor, ServerID: id, ServerUUID: uuid, File: "mysql-bin.000003", Pos: 1234}.Encode()
	}
	gtid := func(flavor, set string, id uint32) []byte {
		return position.Binlog{Flavor: flavor, ServerID: id, File: "mysql-bin.000003", Pos: 1234, GTIDSet: set}.Encode()
	}
	tests := []struct {
		name      string
		srv       mysqlserver.Server
		state     string
		gtidMode  string
		stored    []byte
		storedErr error
		want      Status
		inDetail  string
	}{
		{"unreachable", mysqlserver.Server{}, "", "", nil, nil, Skip, "unreachable"},
		{"redis unreadable", maria(1), "0-1-5", "", nil, errors.New("boom"), Skip, "boom"},
		{"nothing stored, mariadb", maria(1), "0-1-5", "", nil, nil, Pass, "a first start stores a GTID position"},
		{"nothing stored, mysql gtid_mode ON", my(1, uuidNew), uuidNew + ":1-5", "ON", nil, nil, Pass, "a first start stores a GTID position"},
		{"nothing stored, mysql gtid_mode OFF", my(1, uuidNew), "", "OFF", nil, nil, Warn, "stores a file position, which only this server can resume"},
		{"nothing stored, mysql gtid_mode ON_PERMISSIVE", my(1, uuidNew), uuidNew + ":1-5", "ON_PERMISSIVE", nil, nil, Warn, "gtid_mode is ON_PERMISSIVE"},
		{"file position of this mariadb server", maria(1), "0-1-5", "", filePos("mariadb", 1, ""), nil, Pass, "converts it to a GTID position at start"},
		{"file position of this mysql server, gtid_mode ON", my(1, uuidOld), uuidOld + ":1-5", "ON", filePos("mysql", 1, uuidOld), nil, Warn, "cannot convert"},
		{"file position of this mysql server, gtid_mode OFF", my(1, uuidOld), "", "OFF", filePos("mysql", 1, uuidOld), nil, Warn, "gtid_mode is OFF"},
		{"file position of another server", maria(2), "0-1-5", "", filePos("mariadb", 1, ""), nil, Warn, "server-local"},
		{"file position of another mysql server (uuid)", my(1, uuidNew), uuidOld + ":1-5", "ON", filePos("mysql", 1, uuidOld), nil, Warn, "server-local"},
		{"mariadb GTID set after a failover", maria(2), "0-1-100,0-2-140", "", gtid("mariadb", "0-1-100", 1), nil, Pass, "survives a failover"},
		{"mariadb GTID set the promoted replica never received", maria(2), "0-1-90,0-2-140", "", gtid("mariadb", "0-1-100", 1), nil, Warn, "never shipped"},
		{"mysql GTID set after a failover", my(2, uuidNew), uuidOld + ":1-100," + uuidNew + ":1-3", "ON", gtid("mysql", uuidOld+":1-100", 1), nil, Pass, "survives a failover"},
		{"mysql GTID set the promoted replica never received", my(2, uuidNew), uuidOld + ":1-90," + uuidNew + ":1-30", "ON", gtid("mysql", uuidOld+":1-100", 1), nil, Warn, "never shipped"},
		{"other flavor", my(1, uuidOld), uuidOld + ":1-5", "ON", gtid("mariadb", "0-1-100", 1), nil, Warn, "belongs to a mariadb server"},
		{"undecodable", maria(1), "0-1-5", "", []byte("{"), nil, Warn, "cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkFailover(tt.srv, gtidInfo{state: tt.state, mode: tt.gtidMode}, tt.stored, tt.storedErr)
			if got.Status != tt.want || !strings.Contains(got.Detail, tt.inDetail) || got.Name != NameFailover {
				t.Errorf("got %s %q; want %s with %q", got.Status, got.Detail, tt.want, tt.inDetail)
			}
			if got.Status == Warn && got.Fix == "" {
				t.Errorf("a warning without a fix: %q", got.Detail)
			}
		})
	}
}
