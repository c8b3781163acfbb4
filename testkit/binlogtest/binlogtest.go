// Package binlogtest builds what go-mysql hands the binlog reader, for the
// tests of the reader (package canal) and of its row decoding (package
// binlogrow): the default outbox table's table map and rows, and a parser of
// recorded binlog files that decodes as the live reader does, and those
// files (FixtureDir).
package binlogtest

import (
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Column is a column of the default outbox table: its name and data type as
// information_schema shows them, and the binlog type code it travels as.
type Column struct {
	Name, DataType string
	BinlogType     byte
}

// Columns are the default outbox table's columns, in table order.
var Columns = []Column{
	{"id", "bigint", mysql.MYSQL_TYPE_LONGLONG},
	{"message_id", "char", mysql.MYSQL_TYPE_STRING},
	{"aggregate_type", "varchar", mysql.MYSQL_TYPE_VARCHAR},
	{"aggregate_id", "varchar", mysql.MYSQL_TYPE_VARCHAR},
	{"event_type", "varchar", mysql.MYSQL_TYPE_VARCHAR},
	{"payload", "longblob", mysql.MYSQL_TYPE_BLOB},
	{"headers", "json", mysql.MYSQL_TYPE_JSON},
	{"occurred_at", "datetime", mysql.MYSQL_TYPE_DATETIME2},
}

// TableMap builds the TABLE_MAP event of db.table. With names it carries the
// column names as binlog_row_metadata=FULL does; without, ColumnName is nil.
func TableMap(db, table string, names []string, types []byte) *replication.TableMapEvent {
	tm := &replication.TableMapEvent{
		Schema: []byte(db), Table: []byte(table),
		ColumnCount: uint64(len(types)), ColumnType: types,
	}
	if names != nil {
		tm.ColumnName = make([][]byte, len(names))
		for i, n := range names {
			tm.ColumnName[i] = []byte(n)
		}
	}
	return tm
}

// OutboxTableMap is the TABLE_MAP of the default outbox table in app.outbox.
func OutboxTableMap(withNames bool) *replication.TableMapEvent {
	var names []string
	types := make([]byte, len(Columns))
	for i, c := range Columns {
		types[i] = c.BinlogType
		if withNames {
			names = append(names, c.Name)
		}
	}
	return TableMap("app", "outbox", names, types)
}

// OutboxRow is a row of the default outbox table as the binlog decoder
// delivers it.
func OutboxRow(id int64, payload string) []any {
	return []any{
		id, "m-" + strconv.FormatInt(id, 10), "order", "42", "created",
		[]byte(payload), []byte(`{"k":"v"}`), "2024-05-06 07:08:09.123456",
	}
}

// NewParser builds a parser the way replication.NewBinlogSyncer builds the
// syncer's, from cfg: given the reader's decoding configuration
// (binlogrow.DecodeConfig), the events it yields from a recorded binlog are
// the ones the live reader gets.
func NewParser(cfg replication.BinlogSyncerConfig) *replication.BinlogParser {
	p := replication.NewBinlogParser()
	p.SetFlavor(cfg.Flavor)
	p.SetRawMode(cfg.RawModeEnabled)
	p.SetParseTime(cfg.ParseTime)
	p.SetTimestampStringLocation(cfg.TimestampStringLocation)
	p.SetUseDecimal(cfg.UseDecimal)
	p.SetUseFloatWithTrailingZero(cfg.UseFloatWithTrailingZero)
	p.SetRenderJSONAsMySQLText(cfg.RenderJSONAsMySQLText)
	p.SetVerifyChecksum(cfg.VerifyChecksum)
	p.SetPayloadDecoderConcurrency(cfg.PayloadDecoderConcurrency)
	p.SetRowsEventDecodeFunc(cfg.RowsEventDecodeFunc)
	p.SetTableMapOptionalMetaDecodeFunc(cfg.TableMapOptionalMetaDecodeFunc)
	return p
}

// FixtureDir is the folder of the binlog files recorded by real MySQL 8.0
// (and 9.6) servers, canal/testdata/mysql8, where the reader that replays
// them lives; README.md there says where each comes from and what it
// covers. No MySQL server runs where the tests run, so they are the only
// check of the reader's MySQL paths against bytes a MySQL server actually
// wrote.
func FixtureDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "canal", "testdata", "mysql8")
}
