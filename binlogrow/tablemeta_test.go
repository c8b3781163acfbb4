package binlogrow

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/position"
	"github.com/binlog-outbox/binlog-outbox/testkit/binlogtest"
)

// optionalFields are the fields of a table map its optional metadata sets.
type optionalFields struct {
	Signedness, Visibility                                                 []byte
	DefaultCharset, ColumnCharset, Geometry, EnumSetDefault, EnumSetColumn []uint64
	Names                                                                  [][]byte
	Set, Enum                                                              [][][]byte
	PrimaryKey, PrimaryKeyPrefix                                           []uint64
}

func optionalOf(tm *replication.TableMapEvent) optionalFields {
	return optionalFields{
		tm.SignednessBitmap, tm.VisibilityBitmap,
		tm.DefaultCharset, tm.ColumnCharset, tm.GeometryType, tm.EnumSetDefaultCharset, tm.EnumSetColumnCharset,
		tm.ColumnName, tm.SetStrValue, tm.EnumStrValue, tm.PrimaryKey, tm.PrimaryKeyPrefix,
	}
}

// tableMapWithMeta encodes a table map of db.outbox with count INT columns
// and meta as its optional metadata.
func tableMapWithMeta(id byte, count int, meta []byte) []byte {
	b := []byte{id, 0, 0, 0, 0, 0, 1, 0}
	b = append(b, 2, 'd', 'b', 0, 6, 'o', 'u', 't', 'b', 'o', 'x', 0)
	b = append(b, byte(count))
	for range count {
		b = append(b, mysql.MYSQL_TYPE_LONG)
	}
	b = append(b, 0) // no column metadata for INT
	b = append(b, make([]byte, (count+7)/8)...)
	b = append(b, meta...)
	return binlogEvent(replication.TABLE_MAP_EVENT, b)
}

// tlv encodes one optional metadata field.
func tlv(typ byte, v ...byte) []byte {
	return append(append([]byte{typ}, mysql.PutLengthEncodedInt(uint64(len(v)))...), v...)
}

// goMySQLTableMap parses raw with go-mysql's own decoding of the optional
// metadata; a panic counts as an error, as onStream's recover makes it.
func goMySQLTableMap(fde, raw []byte) (tm *replication.TableMapEvent, err error) {
	defer func() {
		if r := recover(); r != nil {
			tm, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	p := replication.NewBinlogParser()
	if _, err := p.Parse(fde); err != nil {
		return nil, err
	}
	ev, err := p.Parse(raw)
	if err != nil {
		return nil, err
	}
	return ev.Event.(*replication.TableMapEvent), nil
}

// ourTableMap parses raw with the reader's stash and completes it.
func ourTableMap(fde, raw []byte, metas *tableMetas) (*replication.TableMapEvent, error) {
	p := replication.NewBinlogParser()
	p.SetTableMapOptionalMetaDecodeFunc(metas.stash)
	if _, err := p.Parse(fde); err != nil {
		return nil, err
	}
	ev, err := p.Parse(raw)
	if err != nil {
		return nil, err
	}
	tm := ev.Event.(*replication.TableMapEvent)
	return tm, metas.complete(tm)
}

// TestTableMetas_AsGoMySQL decodes table maps with every field type, and
// every table map of the MySQL 8 fixtures (those inside compressed
// transactions too, completed only once the whole payload is parsed, as the
// live reader's rows events do), and wants go-mysql's fields.
func TestTableMetas_AsGoMySQL(t *testing.T) {
	fde := formatDescription(t)
	every := [][]byte{
		tlv(replication.TABLE_MAP_OPT_META_SIGNEDNESS, 0xa0),
		tlv(replication.TABLE_MAP_OPT_META_DEFAULT_CHARSET, 255, 1, 63),
		tlv(replication.TABLE_MAP_OPT_META_COLUMN_CHARSET, 255, 0xfc, 0x2c, 0x01, 63),
		tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 2, 'i', 'd', 0, 3, 'p', 'a', 'y'),
		tlv(replication.TABLE_MAP_OPT_META_SET_STR_VALUE, 2, 1, 'a', 2, 'b', 'c', 0),
		tlv(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, 1, 3, 'o', 'n', 'e'),
		tlv(replication.TABLE_MAP_OPT_META_GEOMETRY_TYPE, 1, 4),
		tlv(replication.TABLE_MAP_OPT_META_SIMPLE_PRIMARY_KEY, 0, 2),
		tlv(replication.TABLE_MAP_OPT_META_PRIMARY_KEY_WITH_PREFIX, 1, 10),
		tlv(replication.TABLE_MAP_OPT_META_ENUM_AND_SET_DEFAULT_CHARSET, 8),
		tlv(replication.TABLE_MAP_OPT_META_ENUM_AND_SET_COLUMN_CHARSET, 8, 33),
		tlv(replication.TABLE_MAP_OPT_META_COLUMN_VISIBILITY, 0xe0),
		tlv(99, 1, 2, 3), // a type from a later server: skipped
	}
	cases := map[string][]byte{
		"every field":            bytes.Join(every, nil),
		"a field repeated":       append(tlv(replication.TABLE_MAP_OPT_META_SIGNEDNESS, 1), tlv(replication.TABLE_MAP_OPT_META_SIGNEDNESS, 2)...),
		"two primary key fields": append(tlv(replication.TABLE_MAP_OPT_META_SIMPLE_PRIMARY_KEY, 0), tlv(replication.TABLE_MAP_OPT_META_PRIMARY_KEY_WITH_PREFIX, 2, 5)...),
		"empty fields":           append(tlv(replication.TABLE_MAP_OPT_META_SIGNEDNESS), tlv(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE)...),
		"more values than bytes": tlv(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, 3, 1, 'x'),
		"a type byte at the end": {replication.TABLE_MAP_OPT_META_SIGNEDNESS},
		"no optional metadata":   nil,
	}
	for name, meta := range cases {
		t.Run(name, func(t *testing.T) {
			raw := tableMapWithMeta(42, 3, meta)
			want, err := goMySQLTableMap(fde, raw)
			if err != nil {
				t.Fatalf("go-mysql: %v", err)
			}
			got, err := ourTableMap(fde, raw, &tableMetas{})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := optionalOf(got), optionalOf(want); !reflect.DeepEqual(g, w) {
				t.Errorf("fields\n got %+v\nwant %+v", g, w)
			}
		})
	}

	files, err := filepath.Glob(filepath.Join(binlogtest.FixtureDir(), "*"))
	if err != nil {
		t.Fatal(err)
	}
	maps := 0
	for _, file := range files {
		if filepath.Ext(file) == ".md" {
			continue
		}
		var theirs []*replication.TableMapEvent
		collect := func(out *[]*replication.TableMapEvent) func(*replication.BinlogEvent) error {
			return func(ev *replication.BinlogEvent) error {
				switch e := ev.Event.(type) {
				case *replication.TableMapEvent:
					*out = append(*out, e)
				case *replication.TransactionPayloadEvent:
					for _, inner := range e.Events {
						if tm, ok := inner.Event.(*replication.TableMapEvent); ok {
							*out = append(*out, tm)
						}
					}
				}
				return nil
			}
		}
		if err := replication.NewBinlogParser().ParseFile(file, 0, collect(&theirs)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var metas tableMetas
		var ours []*replication.TableMapEvent
		p := replication.NewBinlogParser()
		p.SetTableMapOptionalMetaDecodeFunc(metas.stash)
		if err := p.ParseFile(file, 0, collect(&ours)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(ours) != len(theirs) {
			t.Fatalf("%s: %d table maps, go-mysql %d", file, len(ours), len(theirs))
		}
		// Completed last first: the order rows events of a compressed
		// statement may ask in.
		for i := len(ours) - 1; i >= 0; i-- {
			if err := metas.complete(ours[i]); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		for i := range ours {
			if g, w := optionalOf(ours[i]), optionalOf(theirs[i]); !reflect.DeepEqual(g, w) {
				t.Errorf("%s: table map %d (%s.%s)\n got %+v\nwant %+v", file, i, theirs[i].Schema, theirs[i].Table, g, w)
			}
			if theirs[i].ColumnName != nil {
				maps++
			}
		}
	}
	if maps == 0 {
		t.Fatal("no fixture table map carries column names any more")
	}
}

// TestTableMetas_Refuses wants an error, not a panic or a guess, for
// optional metadata that ends early or does not add up. go-mysql panics on
// most of these; a length past the end it reads into the event's checksum.
func TestTableMetas_Refuses(t *testing.T) {
	fde := formatDescription(t)
	for name, meta := range map[string][]byte{
		"a length past the end":     {replication.TABLE_MAP_OPT_META_SIGNEDNESS, 5, 1},
		"a cut length":              {replication.TABLE_MAP_OPT_META_SIGNEDNESS, 0xfc, 1},
		"a cut integer":             tlv(replication.TABLE_MAP_OPT_META_COLUMN_CHARSET, 0xfd, 1),
		"a cut column name":         tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'a', 1, 'b', 9, 'c'),
		"too few column names":      tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'a'),
		"an even default charset":   tlv(replication.TABLE_MAP_OPT_META_DEFAULT_CHARSET, 8, 1),
		"a cut ENUM value":          tlv(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, 1, 4, 'a'),
		"a cut primary key":         tlv(replication.TABLE_MAP_OPT_META_PRIMARY_KEY_WITH_PREFIX, 0, 0xfe, 1),
		"more ENUM values than any": tlv(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, 0xfd, 1, 0, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ourTableMap(fde, tableMapWithMeta(42, 3, meta), &tableMetas{}); err == nil || !strings.Contains(err.Error(), "db.outbox") {
				t.Fatalf("err = %v, want one naming db.outbox", err)
			}
		})
	}
}

// TestTableMetas_Repeated: the same table map in every transaction is
// decoded once; the others share its fields. Another table map's bytes are
// decoded afresh, and a table map is completed once.
func TestTableMetas_Repeated(t *testing.T) {
	fde := formatDescription(t)
	names := tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'a', 1, 'b', 1, 'c')
	var metas tableMetas
	first, err := ourTableMap(fde, tableMapWithMeta(42, 3, names), &metas)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ourTableMap(fde, tableMapWithMeta(42, 3, names), &metas)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.ColumnName) != 3 || &again.ColumnName[0] != &first.ColumnName[0] {
		t.Errorf("the repeated table map was decoded again: %q", again.ColumnName)
	}
	other, err := ourTableMap(fde, tableMapWithMeta(42, 3, tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'x', 1, 'y', 1, 'z')), &metas)
	if err != nil {
		t.Fatal(err)
	}
	if got := other.ColumnNameString(); !reflect.DeepEqual(got, []string{"x", "y", "z"}) {
		t.Errorf("names %q, want x y z", got)
	}
	if len(metas.pending) != 0 {
		t.Errorf("%d table maps still pending", len(metas.pending))
	}
	other.ColumnName = nil
	if err := metas.complete(other); err != nil || other.ColumnName != nil {
		t.Errorf("completed twice: %q, %v", other.ColumnName, err)
	}

	stash := metas.stash
	allocs := testing.AllocsPerRun(100, func() {
		p := replication.NewBinlogParser()
		p.SetTableMapOptionalMetaDecodeFunc(stash)
		_, _ = p.Parse(fde)
		ev, _ := p.Parse(tableMapWithMeta(42, 3, names))
		_ = metas.complete(ev.Event.(*replication.TableMapEvent))
	})
	base := testing.AllocsPerRun(100, func() {
		p := replication.NewBinlogParser()
		p.SetTableMapOptionalMetaDecodeFunc(func([]byte) error { return nil })
		_, _ = p.Parse(fde)
		_, _ = p.Parse(tableMapWithMeta(42, 3, names))
	})
	if allocs > base {
		t.Errorf("a repeated table map costs %v allocations, %v without its optional metadata", allocs, base)
	}
}

// TestTableMetas_StatementEnd: a statement's pending table maps are
// forgotten at its end, and a binlog that never ends one stops the reader
// rather than drop a table map.
func TestTableMetas_StatementEnd(t *testing.T) {
	var metas tableMetas
	for range maxPendingMetas {
		if err := metas.stash([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := metas.stash([]byte{1}); err != errTooManyTableMaps {
		t.Fatalf("err = %v, want %v", err, errTooManyTableMaps)
	}
	metas.statementEnd()
	if len(metas.pending) != 0 {
		t.Fatalf("%d pending after the statement's end", len(metas.pending))
	}
	if err := metas.stash(nil); err != nil || len(metas.pending) != 0 {
		t.Errorf("empty optional metadata is kept: %d, %v", len(metas.pending), err)
	}
}

// TestDecodeConfig_OptionalMetaOfFollowedTables: with the reader's decoding,
// a table map of a followed table is complete by the time its rows are
// decoded, one of another table stays without its optional metadata, and
// the rows event that ends the statement leaves nothing pending.
func TestDecodeConfig_OptionalMetaOfFollowedTables(t *testing.T) {
	fde := formatDescription(t)
	names := tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'a', 1, 'b', 1, 'c')
	cfg := DecodeConfig(position.FlavorMySQL, func(tm *replication.TableMapEvent) bool { return string(tm.Table) == "outbox" })
	p := binlogtest.NewParser(cfg)
	other := tableMapWithMeta(7, 3, names)
	copy(other[19+13:], "ignore") // db.ignore: not followed
	var tms []*replication.TableMapEvent
	for _, raw := range [][]byte{fde, other, tableMapWithMeta(42, 3, names)} {
		ev, err := p.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if tm, ok := ev.Event.(*replication.TableMapEvent); ok {
			if tm.ColumnName != nil {
				t.Fatalf("%s.%s: optional metadata decoded before its rows", tm.Schema, tm.Table)
			}
			tms = append(tms, tm)
		}
	}
	// Rows of the other table (table id 7), then of the outbox, ending the
	// statement.
	rows := func(id byte, end bool) []byte {
		raw := writeRowsEvent(false, 3, []byte{0x07}, []byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0})
		raw[19] = id
		if !end {
			raw[19+6] = 0 // writeRowsEvent's rows end their statement
		}
		return raw
	}
	for _, raw := range [][]byte{rows(7, false), rows(42, true)} {
		if _, err := p.Parse(raw); err != nil {
			t.Fatal(err)
		}
	}
	if string(tms[0].Table) != "ignore" || tms[0].ColumnName != nil {
		t.Errorf("%s.%s: optional metadata decoded: %q", tms[0].Schema, tms[0].Table, tms[0].ColumnName)
	}
	if got := tms[1].ColumnNameString(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("db.outbox: names %q, want a b c", got)
	}
}

// FuzzTableMetas decodes random optional metadata of a table map of count
// columns with the reader's decoding and with go-mysql's: where go-mysql
// decodes it, the reader must give the same fields; where go-mysql fails
// (or panics), the reader must fail. The differences allowed are refusals
// of the reader's: more ENUM or SET values in a column than MySQL allows,
// which go-mysql reads as empty strings, and lengths past the end, which
// go-mysql reads on into the bytes that follow.
func FuzzTableMetas(f *testing.F) {
	fde := formatDescription(f)
	f.Add(byte(3), tlv(replication.TABLE_MAP_OPT_META_COLUMN_NAME, 1, 'a', 1, 'b', 1, 'c'))
	f.Add(byte(2), append(tlv(replication.TABLE_MAP_OPT_META_SIGNEDNESS, 0x80), tlv(replication.TABLE_MAP_OPT_META_DEFAULT_CHARSET, 255, 1, 63)...))
	f.Add(byte(1), tlv(replication.TABLE_MAP_OPT_META_SET_STR_VALUE, 2, 1, 'a', 0xfc, 1, 0, 'b'))
	f.Add(byte(4), tlv(replication.TABLE_MAP_OPT_META_PRIMARY_KEY_WITH_PREFIX, 0, 0, 3, 0xfd, 1, 2, 3))
	f.Fuzz(func(t *testing.T, count byte, meta []byte) {
		raw := tableMapWithMeta(42, int(count%40), meta)
		got, gerr := ourTableMap(fde, raw, &tableMetas{})
		if errors.Is(gerr, errTooManyValues) {
			return // go-mysql would allocate for millions of values
		}
		want, werr := goMySQLTableMap(fde, raw)
		switch {
		case werr == nil && gerr == nil:
			if g, w := optionalOf(got), optionalOf(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("fields\n got %+v\nwant %+v", g, w)
			}
		case werr == nil:
			// go-mysql slices past the end of a field or of the metadata
			// as far as the buffer goes (into the checksum); the reader
			// refuses to.
			if !errors.Is(gerr, errMetaTruncated) {
				t.Fatalf("go-mysql decodes it, the reader: %v", gerr)
			}
		case gerr == nil:
			t.Fatalf("go-mysql: %v; the reader decodes it: %+v", werr, optionalOf(got))
		}
	})
}
