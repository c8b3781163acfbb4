package binlogrow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// imageColumnDef is a column of a table map the tests encode.
type imageColumnDef struct {
	typ  byte
	meta []byte // the table map's metadata bytes of the column
}

// imageTable is a table map the tests encode: its columns and, when
// signed is not nil, the signedness bitmap of its numeric columns.
type imageTable struct {
	cols   []imageColumnDef
	signed []byte
}

// formatDescription returns the raw FORMAT_DESCRIPTION event of a binlog
// MySQL 8 wrote, which a parser needs before any other event.
func formatDescription(t testing.TB) []byte {
	t.Helper()
	var raw []byte
	stop := errors.New("stop")
	p := replication.NewBinlogParser()
	err := p.ParseFile(filepath.Join(binlogtest.FixtureDir(), "mysql-enum-string-set.000001"), 0, func(ev *replication.BinlogEvent) error {
		if ev.Header.EventType == replication.FORMAT_DESCRIPTION_EVENT {
			raw = append([]byte(nil), ev.RawData...)
			return stop
		}
		return nil
	})
	if raw == nil {
		t.Fatalf("no format description event in the fixture: %v", err)
	}
	return raw
}

// binlogEvent frames body as an event of type typ, with a checksum field
// (the fixture's format description says CRC32; parsers do not check it).
func binlogEvent(typ replication.EventType, body []byte) []byte {
	ev := make([]byte, 19, 19+len(body)+4)
	binary.LittleEndian.PutUint32(ev[0:], 1700000000)
	ev[4] = byte(typ)
	binary.LittleEndian.PutUint32(ev[5:], 1)
	binary.LittleEndian.PutUint32(ev[9:], uint32(19+len(body)+4))
	ev = append(ev, body...)
	return append(ev, 0, 0, 0, 0)
}

func (tb imageTable) tableMapEvent() []byte {
	b := []byte{42, 0, 0, 0, 0, 0, 1, 0}
	b = append(b, 2, 'd', 'b', 0, 6, 'o', 'u', 't', 'b', 'o', 'x', 0)
	b = append(b, byte(len(tb.cols)))
	var meta []byte
	for _, c := range tb.cols {
		b = append(b, c.typ)
		meta = append(meta, c.meta...)
	}
	b = append(b, byte(len(meta)))
	b = append(b, meta...)
	b = append(b, make([]byte, (len(tb.cols)+7)/8)...)
	if tb.signed != nil {
		b = append(b, replication.TABLE_MAP_OPT_META_SIGNEDNESS, byte(len(tb.signed)))
		b = append(b, tb.signed...)
	}
	return binlogEvent(replication.TABLE_MAP_EVENT, b)
}

// writeRowsEvent encodes a WRITE_ROWS event (v2, or MariaDB's v1) of
// count columns with column bitmap bitmap and the row images.
func writeRowsEvent(v1 bool, count int, bitmap, images []byte) []byte {
	b := []byte{42, 0, 0, 0, 0, 0, 1, 0}
	typ := replication.WRITE_ROWS_EVENTv1
	if !v1 {
		typ = replication.WRITE_ROWS_EVENTv2
		b = append(b, 2, 0)
	}
	b = append(b, byte(count))
	b = append(b, bitmap...)
	b = append(b, images...)
	return binlogEvent(typ, b)
}

// decodeBoth parses the table map and rows event with the reader's decoding
// and with go-mysql's own, and returns both rows events (nil with the
// error of a parse that failed) and whether imageDecoder decoded the rows.
func decodeBoth(t testing.TB, fde, tableMap, rows []byte) (ours, theirs *replication.RowsEvent, oursErr, theirsErr error, fast bool) {
	t.Helper()
	cfg := DecodeConfig(position.FlavorMySQL, func(*replication.TableMapEvent) bool { return true })
	cfg.TableMapOptionalMetaDecodeFunc = nil // go-mysql's: the rows decoding is under test
	var d imageDecoder
	cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
		pos, err := ev.DecodeHeader(data)
		if err != nil {
			return err
		}
		if fast = d.decode(ev, pos, data); fast {
			return nil
		}
		return ev.DecodeData(pos, data)
	}
	ref := cfg
	ref.RowsEventDecodeFunc = nil
	parse := func(cfg replication.BinlogSyncerConfig) (*replication.RowsEvent, error) {
		p := binlogtest.NewParser(cfg)
		for _, raw := range [][]byte{fde, tableMap} {
			if _, err := p.Parse(raw); err != nil {
				return nil, fmt.Errorf("setup: %w", err)
			}
		}
		ev, err := p.Parse(rows)
		if err != nil {
			return nil, err
		}
		return ev.Event.(*replication.RowsEvent), nil
	}
	theirs, theirsErr = parse(ref)
	ours, oursErr = parse(cfg)
	return ours, theirs, oursErr, theirsErr, fast
}

// walkRows parses rows (after fde and tableMap) with the reader's
// decoding whose walk always says the rows are not kept, and returns the
// rows event and whether imageDecoder walked it.
func walkRows(t testing.TB, fde, tableMap, rows []byte) (ev *replication.RowsEvent, walked bool, err error) {
	t.Helper()
	cfg := DecodeConfigWalking(position.FlavorMySQL, func(*replication.TableMapEvent) bool { return true }, func() bool { return true })
	cfg.TableMapOptionalMetaDecodeFunc = nil
	p := binlogtest.NewParser(cfg)
	for _, raw := range [][]byte{fde, tableMap} {
		if _, err := p.Parse(raw); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	e, err := p.Parse(rows)
	if err != nil {
		return nil, false, err
	}
	ev = e.Event.(*replication.RowsEvent)
	return ev, Walked(ev), nil
}

// sameRows reports how two decodings of the same event differ, "" when
// they do not: the same values of the same Go types (floats by their bits,
// so that NaN equals itself) and the same skipped columns.
func sameRows(ours, theirs *replication.RowsEvent) string {
	if len(ours.Rows) != len(theirs.Rows) {
		return fmt.Sprintf("%d rows, go-mysql %d", len(ours.Rows), len(theirs.Rows))
	}
	for i := range theirs.Rows {
		if len(ours.Rows[i]) != len(theirs.Rows[i]) {
			return fmt.Sprintf("row %d: %d values, go-mysql %d", i, len(ours.Rows[i]), len(theirs.Rows[i]))
		}
		for j, want := range theirs.Rows[i] {
			got := ours.Rows[i][j]
			if reflect.TypeOf(got) != reflect.TypeOf(want) {
				return fmt.Sprintf("row %d column %d: %T %#v, go-mysql %T %#v", i, j, got, got, want, want)
			}
			switch w := want.(type) {
			case float32:
				if math.Float32bits(w) != math.Float32bits(got.(float32)) {
					return fmt.Sprintf("row %d column %d: %v, go-mysql %v", i, j, got, want)
				}
				continue
			case float64:
				if math.Float64bits(w) != math.Float64bits(got.(float64)) {
					return fmt.Sprintf("row %d column %d: %v, go-mysql %v", i, j, got, want)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Sprintf("row %d column %d: %#v, go-mysql %#v", i, j, got, want)
			}
		}
	}
	if !reflect.DeepEqual(ours.SkippedColumns, theirs.SkippedColumns) {
		return fmt.Sprintf("skipped columns %v, go-mysql %v", ours.SkippedColumns, theirs.SkippedColumns)
	}
	return ""
}

// datetime2Bytes encodes a DATETIME(dec) value as MySQL does.
func datetime2Bytes(year, month, day, hour, minute, second, micro, dec int) []byte {
	v := (int64(year*13+month)<<5|int64(day))<<17 | int64(hour)<<12 | int64(minute)<<6 | int64(second)
	v += 0x8000000000
	b := []byte{byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	return append(b, fracBytes(micro, dec)...)
}

func fracBytes(micro, dec int) []byte {
	switch dec {
	case 1, 2:
		return []byte{byte(micro / 10000)}
	case 3, 4:
		v := micro / 100
		return []byte{byte(v >> 8), byte(v)}
	case 5, 6:
		return []byte{byte(micro >> 16), byte(micro >> 8), byte(micro)}
	}
	return nil
}

func timestamp2Bytes(sec uint32, micro, dec int) []byte {
	return append(binary.BigEndian.AppendUint32(nil, sec), fracBytes(micro, dec)...)
}

func lenString(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// outboxImageTable is the default outbox table as MariaDB and MySQL write
// its table map: id, message_id, aggregate_type, aggregate_id, event_type,
// schema_version, payload (LONGTEXT on MariaDB), headers, occurred_at,
// sent_at.
var outboxImageTable = imageTable{cols: []imageColumnDef{
	{mysql.MYSQL_TYPE_LONGLONG, nil},
	{mysql.MYSQL_TYPE_STRING, []byte{0xfe, 104}},
	{mysql.MYSQL_TYPE_VARCHAR, []byte{0xfc, 0x03}},
	{mysql.MYSQL_TYPE_VARCHAR, []byte{0xfc, 0x03}},
	{mysql.MYSQL_TYPE_VARCHAR, []byte{0xfc, 0x03}},
	{mysql.MYSQL_TYPE_LONG, nil},
	{mysql.MYSQL_TYPE_BLOB, []byte{4}},
	{mysql.MYSQL_TYPE_BLOB, []byte{4}},
	{mysql.MYSQL_TYPE_DATETIME2, []byte{6}},
	{mysql.MYSQL_TYPE_DATETIME2, []byte{6}},
}, signed: []byte{0xc0}}

// outboxImage is a row of outboxImageTable with headers and sent_at NULL.
func outboxImage(id uint64) []byte {
	b := []byte{0x80, 0x02} // NULL: headers (8th column), sent_at (10th)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = append(b, lenString("01JF3Z8K6Q9W2T5V7X0YB4N1MC")...)
	b = binary.LittleEndian.AppendUint16(b, 5)
	b = append(b, "order"...)
	b = binary.LittleEndian.AppendUint16(b, 6)
	b = append(b, "o-1234"...)
	b = binary.LittleEndian.AppendUint16(b, 13)
	b = append(b, "order.created"...)
	b = binary.LittleEndian.AppendUint32(b, 3)
	payload := `{"total":4200,"currency":"EUR"}`
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, datetime2Bytes(2026, 12, 2, 3, 25, 40, 123456, 6)...)
}

// TestImageDecoder_AsGoMySQL decodes row images of every column type with
// the reader's decoding and with go-mysql's own: the values must be the
// same, and the types the decoder handles itself must not have gone to
// go-mysql.
func TestImageDecoder_AsGoMySQL(t *testing.T) {
	fde := formatDescription(t)
	col := func(typ byte, meta ...byte) imageTable {
		return imageTable{cols: []imageColumnDef{{typ, meta}}}
	}
	unsigned := func(tb imageTable) imageTable { tb.signed = []byte{0x80}; return tb }
	value := func(b ...byte) []byte { return append([]byte{0}, b...) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return value(b...)
	}
	for _, c := range []struct {
		name  string
		table imageTable
		image []byte
		fast  bool // decoded by imageDecoder, not go-mysql
		v1    bool
	}{
		{"outbox row", outboxImageTable, outboxImage(1 << 40), true, false},
		{"outbox row, MariaDB v1 event", outboxImageTable, outboxImage(7), true, true},
		{"two outbox rows", outboxImageTable, append(outboxImage(1), outboxImage(2)...), true, false},
		{"tinyint", col(mysql.MYSQL_TYPE_TINY), value(0xff), true, false},
		{"tinyint unsigned", unsigned(col(mysql.MYSQL_TYPE_TINY)), value(0xff), true, false},
		{"smallint", col(mysql.MYSQL_TYPE_SHORT), value(0x01, 0x80), true, false},
		{"smallint unsigned", unsigned(col(mysql.MYSQL_TYPE_SHORT)), value(0x01, 0x80), true, false},
		{"mediumint", col(mysql.MYSQL_TYPE_INT24), value(0x01, 0x00, 0x80), true, false},
		{"mediumint unsigned", unsigned(col(mysql.MYSQL_TYPE_INT24)), value(0x01, 0x00, 0x80), true, false},
		{"int", col(mysql.MYSQL_TYPE_LONG), value(1, 2, 3, 0x84), true, false},
		{"int unsigned", unsigned(col(mysql.MYSQL_TYPE_LONG)), value(1, 2, 3, 0x84), true, false},
		{"bigint", col(mysql.MYSQL_TYPE_LONGLONG), value(1, 2, 3, 4, 5, 6, 7, 0xff), true, false},
		{"bigint unsigned", unsigned(col(mysql.MYSQL_TYPE_LONGLONG)), value(1, 2, 3, 4, 5, 6, 7, 0xff), true, false},
		{"float", col(mysql.MYSQL_TYPE_FLOAT, 4), value(0, 0, 0x80, 0x3f), true, false},
		{"double", col(mysql.MYSQL_TYPE_DOUBLE, 8), value(0, 0, 0, 0, 0, 0, 0xf0, 0x3f), true, false},
		{"year", col(mysql.MYSQL_TYPE_YEAR), value(126), true, false},
		{"year 0", col(mysql.MYSQL_TYPE_YEAR), value(0), true, false},
		{"varchar(10)", col(mysql.MYSQL_TYPE_VARCHAR, 10, 0), value(lenString("héllo")...), true, false},
		{"varchar(300)", col(mysql.MYSQL_TYPE_VARCHAR, 0x2c, 0x01), value(3, 0, 'a', 'b', 'c'), true, false},
		{"char(26)", col(mysql.MYSQL_TYPE_STRING, 0xfe, 26), value(lenString("01JF3Z8K6Q9W2T5V7X0YB4N1MC")...), true, false},
		{"char(255) utf8mb4 (length 1020)", col(mysql.MYSQL_TYPE_STRING, 0xce, 0xfc), value(2, 0, 'x', 'y'), true, false},
		{"binary(4)", col(mysql.MYSQL_TYPE_STRING, 0xfe, 4), value(4, 0, 1, 2, 3), true, false},
		{"tinyblob", col(mysql.MYSQL_TYPE_BLOB, 1), value(2, 'h', 'i'), true, false},
		{"blob", col(mysql.MYSQL_TYPE_BLOB, 2), value(2, 0, 'h', 'i'), true, false},
		{"mediumblob", col(mysql.MYSQL_TYPE_BLOB, 3), value(2, 0, 0, 'h', 'i'), true, false},
		{"longtext", col(mysql.MYSQL_TYPE_BLOB, 4), value(0, 0, 0, 0), true, false},
		{"geometry", col(mysql.MYSQL_TYPE_GEOMETRY, 4), value(1, 0, 0, 0, 9), true, false},
		{"datetime", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(datetime2Bytes(2024, 2, 29, 23, 59, 59, 0, 0)...), true, false},
		{"datetime(6)", col(mysql.MYSQL_TYPE_DATETIME2, 6), value(datetime2Bytes(1999, 1, 2, 3, 4, 5, 60708, 6)...), true, false},
		{"datetime(3)", col(mysql.MYSQL_TYPE_DATETIME2, 3), value(datetime2Bytes(2026, 12, 2, 0, 0, 0, 999000, 3)...), true, false},
		{"datetime(1)", col(mysql.MYSQL_TYPE_DATETIME2, 1), value(datetime2Bytes(2026, 12, 2, 0, 0, 0, 900000, 1)...), true, false},
		{"datetime(2), a fraction byte over 99", col(mysql.MYSQL_TYPE_DATETIME2, 2), value(append(datetime2Bytes(2026, 1, 1, 0, 0, 0, 0, 0), 0xfa)...), true, false},
		{"datetime(5)", col(mysql.MYSQL_TYPE_DATETIME2, 5), value(datetime2Bytes(1000, 1, 1, 0, 0, 0, 12340, 5)...), true, false},
		{"datetime zero", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(datetime2Bytes(0, 0, 0, 0, 0, 0, 0, 0)...), true, false},
		{"datetime(4) zero", col(mysql.MYSQL_TYPE_DATETIME2, 4), value(datetime2Bytes(0, 0, 0, 0, 0, 0, 0, 4)...), true, false},
		{"datetime zero month and day", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(datetime2Bytes(2020, 0, 0, 1, 2, 3, 0, 0)...), true, false},
		{"datetime 9999-12-31", col(mysql.MYSQL_TYPE_DATETIME2, 6), value(datetime2Bytes(9999, 12, 31, 23, 59, 59, 999999, 6)...), true, false},
		{"datetime before 1970", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(datetime2Bytes(1, 1, 1, 0, 0, 0, 0, 0)...), true, false},
		{"datetime below the offset", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(0x10, 0, 0, 0, 0), true, false},
		{"datetime, 0 bytes", col(mysql.MYSQL_TYPE_DATETIME2, 0), value(0, 0, 0, 0, 0), false, false},
		{"timestamp", col(mysql.MYSQL_TYPE_TIMESTAMP2, 0), value(timestamp2Bytes(1700000000, 0, 0)...), true, false},
		{"timestamp(6)", col(mysql.MYSQL_TYPE_TIMESTAMP2, 6), value(timestamp2Bytes(1700000000, 123456, 6)...), true, false},
		{"timestamp(3)", col(mysql.MYSQL_TYPE_TIMESTAMP2, 3), value(timestamp2Bytes(2147483647, 999000, 3)...), true, false},
		{"timestamp(2), a fraction byte over 99", col(mysql.MYSQL_TYPE_TIMESTAMP2, 2), value(append(timestamp2Bytes(4294967295, 0, 0), 0xff)...), true, false},
		{"timestamp zero", col(mysql.MYSQL_TYPE_TIMESTAMP2, 0), value(0, 0, 0, 0), true, false},
		{"timestamp(6) zero", col(mysql.MYSQL_TYPE_TIMESTAMP2, 6), value(0, 0, 0, 0, 0, 0, 7), true, false},
		{"null", outboxImageTable, append([]byte{0xff, 0x03}, []byte{}...), true, false},
		{"decimal(10,2)", col(mysql.MYSQL_TYPE_NEWDECIMAL, 10, 2), value(0x80, 0, 0, 0x30, 0x39), true, false},
		{"decimal(65,30)", col(mysql.MYSQL_TYPE_NEWDECIMAL, 65, 30), value(append([]byte{0x80}, bytes.Repeat([]byte{1}, 29)...)...), true, false},
		{"decimal(10,2) negative", col(mysql.MYSQL_TYPE_NEWDECIMAL, 10, 2), value(0x7f, 0xff, 0xff, 0xcf, 0xc6), true, false},
		{"json true", col(mysql.MYSQL_TYPE_JSON, 4), value(2, 0, 0, 0, 4, 1), true, false},
		{"json object", col(mysql.MYSQL_TYPE_JSON, 4), cat([]byte{13, 0, 0, 0}, []byte{0, 1, 0, 12, 0, 11, 0, 1, 0, 5, 5, 0, 'a'}), true, false},
		{"json empty", col(mysql.MYSQL_TYPE_JSON, 4), value(0, 0, 0, 0), true, false},
		{"bit(10)", col(mysql.MYSQL_TYPE_BIT, 2, 1), value(0x02, 0x01), true, false},
		{"enum", col(mysql.MYSQL_TYPE_STRING, 0xf7, 1), value(3), true, false},
		{"enum of 300", col(mysql.MYSQL_TYPE_STRING, 0xf7, 2), value(0x2c, 0x01), true, false},
		{"set", col(mysql.MYSQL_TYPE_STRING, 0xf8, 1), value(5), true, false},
		{"time(3)", col(mysql.MYSQL_TYPE_TIME2, 3), value(0x80, 0x10, 0x41, 0x01, 0x02), true, false},
		{"date", col(mysql.MYSQL_TYPE_DATE), value(0x5a, 0xcb, 0x0f), true, false},
		{"old datetime", col(mysql.MYSQL_TYPE_DATETIME), value(binary.LittleEndian.AppendUint64(nil, 20240506070809)...), true, false},
		{"old timestamp", col(mysql.MYSQL_TYPE_TIMESTAMP), value(1, 2, 3, 4), true, false},
		{"old time", col(mysql.MYSQL_TYPE_TIME), value(0x39, 0x30, 0), true, false},
		{"value after a go-mysql one", imageTable{cols: []imageColumnDef{{mysql.MYSQL_TYPE_NEWDECIMAL, []byte{10, 2}}, {mysql.MYSQL_TYPE_VARCHAR, []byte{10, 0}}}},
			cat([]byte{0x80, 0, 0, 0x30, 0x39}, lenString("after")), true, false},
		// What it does not decode goes to go-mysql whole, error and all.
		{"datetime(7)", col(mysql.MYSQL_TYPE_DATETIME2, 7), value(make([]byte, 9)...), false, false},
		{"blob with 5 length bytes", col(mysql.MYSQL_TYPE_BLOB, 5), value(1, 0, 0, 0, 0, 'x'), false, false},
		{"unknown type", col(0xe0), value(1), false, false},
		{"enum with 3 bytes", col(mysql.MYSQL_TYPE_STRING, 0xf7, 3), value(1, 2, 3), false, false},
		{"decimal(2,4)", col(mysql.MYSQL_TYPE_NEWDECIMAL, 2, 4), value(1, 2, 3), false, false},
		{"string cut short", col(mysql.MYSQL_TYPE_VARCHAR, 10, 0), value(5, 'a', 'b'), false, false},
		{"bad json", col(mysql.MYSQL_TYPE_JSON, 4), value(2, 0, 0, 0, 0x77, 1), false, false},
		{"null bitmap missing", col(mysql.MYSQL_TYPE_LONG), nil, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			count := len(c.table.cols)
			bitmap := make([]byte, (count+7)/8)
			for i := range count {
				bitmap[i/8] |= 1 << (i % 8)
			}
			ours, theirs, oursErr, theirsErr, fast := decodeBoth(t, fde, c.table.tableMapEvent(), writeRowsEvent(c.v1, count, bitmap, c.image))
			if (oursErr == nil) != (theirsErr == nil) {
				t.Fatalf("error %v, go-mysql's %v", oursErr, theirsErr)
			}
			if fast != c.fast {
				t.Errorf("decoded by imageDecoder: %v, want %v", fast, c.fast)
			}
			if theirsErr != nil {
				return
			}
			if diff := sameRows(ours, theirs); diff != "" {
				t.Errorf("%s\n ours %#v\n go-mysql %#v", diff, ours.Rows, theirs.Rows)
			}
		})
	}
}

// TestImageDecoder_Skipped holds the columns a row image leaves out
// (binlog_row_image=MINIMAL or NOBLOB) as go-mysql reports them.
func TestImageDecoder_Skipped(t *testing.T) {
	fde := formatDescription(t)
	tb := imageTable{cols: []imageColumnDef{{mysql.MYSQL_TYPE_LONG, nil}, {mysql.MYSQL_TYPE_BLOB, []byte{2}}, {mysql.MYSQL_TYPE_DATETIME2, []byte{0}}}}
	image := append([]byte{0}, 1, 0, 0, 0)
	image = append(image, datetime2Bytes(2026, 1, 2, 3, 4, 5, 0, 0)...)
	ours, theirs, oursErr, theirsErr, fast := decodeBoth(t, fde, tb.tableMapEvent(), writeRowsEvent(false, 3, []byte{0x05}, image))
	if oursErr != nil || theirsErr != nil || !fast {
		t.Fatalf("errors %v and go-mysql's %v; decoded by imageDecoder %v", oursErr, theirsErr, fast)
	}
	if diff := sameRows(ours, theirs); diff != "" {
		t.Error(diff)
	}
	if want := [][]int{{1}}; !reflect.DeepEqual(ours.SkippedColumns, want) {
		t.Errorf("skipped %v, want %v", ours.SkippedColumns, want)
	}
}

// TestImageDecoder_Fixtures replays every binlog MySQL recorded in
// testdata with the reader's decoding and with go-mysql's: each rows event
// must decode to the same values, and the decoder must have decoded some
// of them itself.
func TestImageDecoder_Fixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(binlogtest.FixtureDir(), "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if filepath.Ext(file) == ".md" {
			continue
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg := DecodeConfig(position.FlavorMySQL, func(*replication.TableMapEvent) bool { return true })
			cfg.TableMapOptionalMetaDecodeFunc = nil // go-mysql's: the rows decoding is under test
			var d imageDecoder
			fast := 0
			cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
				pos, err := ev.DecodeHeader(data)
				if err != nil {
					return err
				}
				if d.decode(ev, pos, data) {
					fast++
					return nil
				}
				return ev.DecodeData(pos, data)
			}
			ref := cfg
			ref.RowsEventDecodeFunc = nil
			rowsOf := func(cfg replication.BinlogSyncerConfig) []*replication.RowsEvent {
				var out []*replication.RowsEvent
				var add func(ev replication.Event)
				add = func(ev replication.Event) {
					switch e := ev.(type) {
					case *replication.RowsEvent:
						out = append(out, e)
					case *replication.TransactionPayloadEvent:
						for _, in := range e.Events {
							add(in.Event)
						}
					}
				}
				if err := binlogtest.NewParser(cfg).ParseFile(file, 0, func(ev *replication.BinlogEvent) error {
					add(ev.Event)
					return nil
				}); err != nil {
					t.Fatalf("parse: %v", err)
				}
				return out
			}
			ours, theirs := rowsOf(cfg), rowsOf(ref)
			if len(ours) != len(theirs) {
				t.Fatalf("%d rows events, go-mysql %d", len(ours), len(theirs))
			}
			for i := range theirs {
				if diff := sameRows(ours[i], theirs[i]); diff != "" {
					t.Errorf("rows event %d of %s.%s: %s", i, theirs[i].Table.Schema, theirs[i].Table.Table, diff)
				}
			}
			inserts := 0
			for _, ev := range theirs {
				if ev.Type() == replication.EnumRowsEventTypeInsert {
					inserts++
				}
			}
			if inserts > 0 && fast == 0 {
				t.Errorf("none of the %d INSERT events decoded by imageDecoder", inserts)
			}
			t.Logf("%d rows events, %d INSERTs, %d decoded by imageDecoder", len(theirs), inserts, fast)
		})
	}
}

// BenchmarkImageDecoder_OutboxRow decodes a single-row INSERT of the
// default outbox table (MariaDB's shape) with the reader's decoding and
// with go-mysql's DecodeData, and walks it, the cost per event of each on
// the parsing goroutine.
func BenchmarkImageDecoder_OutboxRow(b *testing.B) {
	fde := formatDescription(b)
	var ev *replication.RowsEvent
	var data []byte
	var pos int
	cfg := DecodeConfig(position.FlavorMariaDB, func(*replication.TableMapEvent) bool { return true })
	cfg.TableMapOptionalMetaDecodeFunc = nil
	cfg.RowsEventDecodeFunc = func(e *replication.RowsEvent, d []byte) error {
		p, err := e.DecodeHeader(d)
		ev, data, pos = e, d, p
		return err
	}
	p := binlogtest.NewParser(cfg)
	bitmap := []byte{0xff, 0x03}
	for _, raw := range [][]byte{fde, outboxImageTable.tableMapEvent(), writeRowsEvent(true, 10, bitmap, outboxImage(1))} {
		if _, err := p.Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("go-mysql", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ev.DecodeData(pos, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("imageDecoder", func(b *testing.B) {
		var d imageDecoder
		b.ReportAllocs()
		for b.Loop() {
			if !d.decode(ev, pos, data) {
				b.Fatal("not decoded")
			}
		}
	})
	// What the first read of a transaction too large to keep pays per
	// row instead (DecodeConfigWalking).
	b.Run("walk", func(b *testing.B) {
		var d imageDecoder
		b.ReportAllocs()
		for b.Loop() {
			if !d.walk(ev, pos, data) {
				b.Fatal("not walked")
			}
		}
	})
}

// TestDecodeConfig_UpdatesAndDeletesUndecoded replays the recorded binlogs
// with the reader's decoding: the UPDATEs and DELETEs of followed tables,
// which the relay does not read, keep their header and no rows; INSERTs
// keep theirs.
func TestDecodeConfig_UpdatesAndDeletesUndecoded(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(binlogtest.FixtureDir(), "*"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[replication.EnumRowsEventType]int{}
	for _, file := range files {
		if filepath.Ext(file) == ".md" {
			continue
		}
		var check func(ev replication.Event)
		check = func(ev replication.Event) {
			switch e := ev.(type) {
			case *replication.RowsEvent:
				seen[e.Type()]++
				switch e.Type() {
				case replication.EnumRowsEventTypeUpdate, replication.EnumRowsEventTypeDelete:
					if e.Table == nil || e.Rows != nil {
						t.Errorf("%s: %s of table %d: table map %v, %d rows decoded, want the table map and none", filepath.Base(file), e.Type(), e.TableID, e.Table != nil, len(e.Rows))
					}
				case replication.EnumRowsEventTypeInsert:
					if len(e.Rows) == 0 {
						t.Errorf("%s: INSERT into %s with no rows decoded", filepath.Base(file), e.Table.Table)
					}
				}
			case *replication.TransactionPayloadEvent:
				for _, in := range e.Events {
					check(in.Event)
				}
			}
		}
		cfg := DecodeConfig(position.FlavorMySQL, func(*replication.TableMapEvent) bool { return true })
		if err := binlogtest.NewParser(cfg).ParseFile(file, 0, func(ev *replication.BinlogEvent) error {
			check(ev.Event)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if seen[replication.EnumRowsEventTypeUpdate] == 0 || seen[replication.EnumRowsEventTypeInsert] == 0 {
		t.Errorf("rows events seen by type: %v, want INSERTs and UPDATEs", seen)
	}
}
