package binlogrow

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/charset"
	"github.com/binlog-outbox/binlog-outbox/internal/eventrow"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Column is a physical column of the outbox table as information_schema
// describes it.
type Column struct {
	Name string
	// DataType is information_schema.COLUMNS.DATA_TYPE (e.g. "bigint", "json").
	DataType string
	// Unsigned is true for an UNSIGNED integer column: rows whose table map
	// carries no signedness (MariaDB's default binlog_row_metadata) decode
	// its values as signed.
	Unsigned bool
	// Charset is information_schema's CHARACTER_SET_NAME, "" for a column
	// that holds no text: what rows whose table map carries no character
	// sets are converted to UTF-8 from.
	Charset string
}

// ErrNoLayout is a Decoder's answer for rows without column names while no
// layout is proven for them.
var ErrNoLayout = errors.New("no column layout proven for rows without column names")

// ColumnError is a Decoder's answer for rows of a table that have a column
// the relay did not expect, or lack one it maps. Its hint is the way on when
// the table cannot be asked; which way goes on depends on the table as it is
// now, which the reader asks before it stops.
type ColumnError struct {
	Database, Table string
	// Physical is the table's column; Logical the outbox column or the
	// --extra-column field it stands for.
	Physical, Logical string
	// Appeared: the rows have a column the table lacked at start-up;
	// otherwise they lack one the mapping names, or an --extra-column
	// (Extra).
	Appeared, Extra bool
	// err is the error, with the hint for when the table cannot be asked.
	err error
}

// Error implements error.
func (e *ColumnError) Error() string { return e.err.Error() }

// Unwrap returns the error with its hint, which wraps outbox.ErrConfig.
func (e *ColumnError) Unwrap() error { return e.err }

// Layout is where the outbox's columns are in the rows of one table map:
// the index of each logical column in a decoded row, -1 when absent, and
// the character sets their bytes are in. Decoder.Layout makes it.
type Layout struct {
	id, messageID, aggregateType, aggregateID, eventType, payload, headers, occurredAt int
	columnCount                                                                        int
	// fields are the columns carried as fields of their own, in the order
	// of schema.FieldColumns.
	fields []fieldIndex
	// text are the character sets the text columns' bytes are in.
	text textCharsets
}

// textCharsets are the character sets of a layout's text columns; the zero
// Charset for one whose bytes pass as they are (UTF-8, binary, no text).
type textCharsets struct {
	messageID, aggregateType, aggregateID, eventType, payload, headers charset.Charset
}

// fieldIndex is where a column carried as a field of its own is in a row.
type fieldIndex struct {
	name  string
	index int // -1: the rows lack the (optional) column, read as NULL
	// unsigned is the binlog type code of an UNSIGNED integer column whose
	// rows carry no signedness, so that its values decode as signed; 0
	// otherwise.
	unsigned byte
	// text is the column's character set.
	text charset.Charset
}

// Decoder finds the Layout of an outbox table's rows in their table map. It
// maps columns by the names the table map event carries
// (binlog_row_metadata=FULL), so an ALTER TABLE between the event and its
// decoding can never shift values into the wrong fields. Without names it
// maps by position, with a layout the reader proved to be in force at the
// rows, after checking the column count and types against it as a last line
// of defence.
//
// It is not safe for concurrent use: the reader's goroutine has it.
type Decoder struct {
	mapping schema.Mapping
	fields  []schema.ExtraColumn // schema.FieldColumns of mapping and --extra-column
	// columns is the proven layout for positional mapping; nil when none
	// is: rows without names then get ErrNoLayout.
	columns []Column
	absent  []string // optional columns the table lacked at start-up
	// collations name the character set of each collation id, as the
	// server's information_schema does, for table maps that carry the
	// columns' collations (binlog_row_metadata=FULL, and MySQL's MINIMAL);
	// nil when not read, and then columns' Charset is all there is.
	collations map[uint64]string

	// cache: the layout of the last table map seen. A transaction repeats the
	// same table map, and consecutive ones usually carry identical metadata.
	// The tables of a pattern may share a decoder (the reader shares it), so
	// what else the layout depends on is compared too: the columns' real
	// types and collations.
	lastTable   *replication.TableMapEvent
	lastNames   [][]byte
	lastTypes   []byte
	lastMeta    []uint16
	lastDefault []uint64
	lastColumn  []uint64
	lastCount   uint64
	last        Layout
}

// NewDecoder returns a Decoder for the rows of a table with mapping m and
// the --extra-column values extra. columns is the layout proven for rows
// without column names (nil: none); absent are the optional logical columns
// the table lacked at start-up; collations name the character set of each
// collation id of the server (nil: the columns' Charset is all there is).
func NewDecoder(m schema.Mapping, extra []schema.ExtraColumn, columns []Column, absent []string, collations map[uint64]string) *Decoder {
	return &Decoder{mapping: m, fields: schema.FieldColumns(m, extra), columns: columns, absent: absent, collations: collations}
}

// Forget drops the positional layout, and the cached one with it: after a DDL
// on the table a table map with the same count and types may well have its
// columns in another order.
func (d *Decoder) Forget() {
	d.columns = nil
	d.lastTable, d.lastNames, d.lastTypes, d.lastCount, d.last = nil, nil, nil, 0, Layout{}
	d.lastMeta, d.lastDefault, d.lastColumn = nil, nil, nil
}

// Layout returns the layout of the rows of a table map event. Rows without
// column names and no proven layout get ErrNoLayout; a column the table map
// has or lacks against the mapping makes a *ColumnError.
func (d *Decoder) Layout(tm *replication.TableMapEvent) (Layout, error) {
	if tm == d.lastTable {
		return d.last, nil
	}
	if d.lastTable != nil && tm.ColumnCount == d.lastCount && bytes.Equal(tm.ColumnType, d.lastTypes) && equalNames(tm.ColumnName, d.lastNames) &&
		slices.Equal(tm.ColumnMeta, d.lastMeta) && slices.Equal(tm.DefaultCharset, d.lastDefault) && slices.Equal(tm.ColumnCharset, d.lastColumn) {
		d.lastTable = tm
		return d.last, nil
	}
	var l Layout
	var err error
	if tm.ColumnName != nil {
		l, err = d.layoutByName(tm)
	} else {
		l, err = d.layoutByPosition(tm)
	}
	if err != nil {
		return Layout{}, err
	}
	d.charsets(&l, tm)
	d.lastTable, d.lastNames, d.lastTypes, d.lastCount, d.last = tm, tm.ColumnName, tm.ColumnType, tm.ColumnCount, l
	d.lastMeta, d.lastDefault, d.lastColumn = tm.ColumnMeta, tm.DefaultCharset, tm.ColumnCharset
	return l, nil
}

// charsets fills in the character sets of l's text columns: the collations
// the table map carries, which are those the rows were written with, or
// else those of the proven layout.
func (d *Decoder) charsets(l *Layout, tm *replication.TableMapEvent) {
	collations := tm.CollationMap()
	if d.collations == nil {
		collations = nil
	}
	at := func(i int) charset.Charset {
		if i < 0 {
			return charset.Charset{}
		}
		if collations != nil {
			id, ok := collations[i]
			if !ok {
				return charset.Charset{} // no character column
			}
			name, known := d.collations[id]
			if !known {
				name = fmt.Sprintf("unknown (collation id %d)", id)
			}
			c, _ := charset.Lookup(name)
			return c
		}
		if d.columns != nil && i < len(d.columns) {
			c, _ := charset.Lookup(d.columns[i].Charset)
			return c
		}
		return charset.Charset{}
	}
	l.text = textCharsets{
		messageID: at(l.messageID), aggregateType: at(l.aggregateType), aggregateID: at(l.aggregateID),
		eventType: at(l.eventType), payload: at(l.payload), headers: at(l.headers),
	}
	for i := range l.fields {
		l.fields[i].text = at(l.fields[i].index)
	}
}

func equalNames(a, b [][]byte) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (d *Decoder) layoutByName(tm *replication.TableMapEvent) (Layout, error) {
	names := tm.ColumnNameString()
	for _, logical := range d.absent {
		if i := columnIndex(names, logical); i >= 0 {
			n := names[i]
			return Layout{}, &ColumnError{Database: string(tm.Schema), Table: string(tm.Table), Physical: n, Logical: logical, Appeared: true,
				err: outbox.WithHint(fmt.Errorf("%w: binlog rows of %s.%s have a column %q, which the table lacked when the relay started, so entries have gone without %s; the table was altered",
					outbox.ErrConfig, tm.Schema, tm.Table, n, logical),
					"if the table has the column now, restart the relay: it resumes at this transaction and relays the column from here on; if it was dropped since, restart with --column %s=-", logical)}
		}
	}
	l, err := d.fill(names, func(physical, logical string) error {
		return &ColumnError{Database: string(tm.Schema), Table: string(tm.Table), Physical: physical, Logical: logical,
			err: outbox.WithHint(fmt.Errorf("%w: binlog rows of %s.%s have no column %q for %s (columns: %s)",
				outbox.ErrConfig, tm.Schema, tm.Table, physical, logical, strings.Join(names, ", ")),
				"if the column was renamed, map it with --column %s=<name>; if it was dropped, restore it", logical)}
	})
	if err != nil {
		return Layout{}, err
	}
	// With names the table map carries signedness too (FULL includes
	// it), and the syncer decodes UNSIGNED columns as such.
	l.fields, err = d.fieldLayout(names, nil, func(e schema.ExtraColumn) error {
		return &ColumnError{Database: string(tm.Schema), Table: string(tm.Table), Physical: e.Column, Logical: e.Field, Extra: true,
			err: outbox.WithHint(fmt.Errorf("%w: binlog rows of %s.%s have no column %q for --extra-column (columns: %s); the rows were written before the column was added, or after it was dropped",
				outbox.ErrConfig, tm.Schema, tm.Table, e.Column, strings.Join(names, ", ")),
				"restore the column, or drop --extra-column %s and restart", e.Column)}
	})
	return l, err
}

// fieldLayout finds the columns carried as fields of their own among names.
// The schema_version column is optional like any other and reads as NULL
// where the rows lack it; an extra column the user named must be there, and
// missing makes an error. unsigned, when not nil, says which row positions
// are UNSIGNED integer columns decoded as signed.
func (d *Decoder) fieldLayout(names []string, unsigned func(int) byte, missing func(schema.ExtraColumn) error) ([]fieldIndex, error) {
	var out []fieldIndex
	for _, f := range d.fields {
		i := columnIndex(names, f.Column)
		if i < 0 && f.Field != schema.ColSchemaVersion {
			return nil, missing(f)
		}
		fi := fieldIndex{name: f.Field, index: i}
		if i >= 0 && unsigned != nil {
			fi.unsigned = unsigned(i)
		}
		out = append(out, fi)
	}
	return out, nil
}

// fill finds the outbox columns among names, the row's columns in order.
// A mapped column that is missing is an error made by missing, unless it
// is optional: one added later by ALTER TABLE is absent from older events,
// and reads as NULL there.
func (d *Decoder) fill(names []string, missing func(physical, logical string) error) (Layout, error) {
	l := Layout{columnCount: len(names)}
	for _, f := range []struct {
		logical string
		dst     *int
	}{
		{schema.ColID, &l.id}, {schema.ColMessageID, &l.messageID}, {schema.ColAggregateType, &l.aggregateType},
		{schema.ColAggregateID, &l.aggregateID}, {schema.ColEventType, &l.eventType}, {schema.ColPayload, &l.payload},
		{schema.ColHeaders, &l.headers}, {schema.ColOccurredAt, &l.occurredAt},
	} {
		i := -1
		if physical, ok := d.mapping.Physical(f.logical); ok {
			i = columnIndex(names, physical)
			if i < 0 && !schema.Optional(f.logical) {
				return Layout{}, missing(physical, f.logical)
			}
		}
		*f.dst = i
	}
	return l, nil
}

// columnIndex is the position of physical among names, compared as MySQL
// compares column names, without regard to case; -1 if it is not there.
func columnIndex(names []string, physical string) int {
	for i, n := range names {
		if strings.EqualFold(n, physical) {
			return i
		}
	}
	return -1
}

// layoutByPosition maps columns by ordinal position, with the proven layout.
// The proof makes it safe; a different count or incompatible types mean the
// proof missed a change (a DDL it did not recognise), so it stops.
func (d *Decoder) layoutByPosition(tm *replication.TableMapEvent) (Layout, error) {
	if d.columns == nil {
		return Layout{}, ErrNoLayout
	}
	hint := "set binlog_row_metadata=FULL on the server (SET GLOBAL binlog_row_metadata=FULL and in my.cnf) so the relay maps columns by name; events written before that carry no names and need the table as it was then"
	if int(tm.ColumnCount) != len(d.columns) {
		return Layout{}, outbox.WithHint(fmt.Errorf("%w: binlog rows of %s.%s have %d columns but the table has %d; the table was altered and the binlog carries no column names",
			outbox.ErrConfig, tm.Schema, tm.Table, tm.ColumnCount, len(d.columns)), "%s", hint)
	}
	for i, c := range d.columns {
		if !compatible(tm.ColumnType[i], c.DataType) {
			return Layout{}, outbox.WithHint(fmt.Errorf("%w: binlog column %d of %s.%s has type code %d, but column %s is %s; the table was altered and the binlog carries no column names",
				outbox.ErrConfig, i+1, tm.Schema, tm.Table, tm.ColumnType[i], c.Name, c.DataType), "%s", hint)
		}
	}
	names := make([]string, len(d.columns))
	for i, c := range d.columns {
		names[i] = c.Name
	}
	l, err := d.fill(names, func(physical, logical string) error {
		return outbox.WithHint(fmt.Errorf("%w: table %s.%s has no column %q for %s", outbox.ErrConfig, tm.Schema, tm.Table, physical, logical),
			"if the column was renamed, map it with --column %s=<name>; if it was dropped, restore it", logical)
	})
	if err != nil {
		return Layout{}, err
	}
	// Signedness from the proven layout where the table map has none
	// (MariaDB's default); MySQL's MINIMAL metadata carries it.
	var unsigned func(int) byte
	if len(tm.SignednessBitmap) == 0 {
		unsigned = func(i int) byte {
			if d.columns[i].Unsigned {
				return tm.ColumnType[i]
			}
			return 0
		}
	}
	l.fields, err = d.fieldLayout(names, unsigned, func(e schema.ExtraColumn) error {
		return outbox.WithHint(fmt.Errorf("%w: table %s.%s has no column %q for --extra-column (columns: %s)", outbox.ErrConfig, tm.Schema, tm.Table, e.Column, strings.Join(names, ", ")),
			"restore the column, or drop --extra-column %s and restart", e.Column)
	})
	return l, err
}

// binlogClass and dataTypeClass group binlog type codes and
// information_schema data types into classes whose values decode alike.
func binlogClass(t byte) string {
	switch t {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_YEAR:
		return "int"
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING:
		return "string"
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_JSON:
		return "blob"
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE:
		return "time"
	}
	return "other"
}

func dataTypeClass(dt string) string {
	switch strings.ToLower(dt) {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year":
		return "int"
	case "char", "varchar", "binary", "varbinary", "enum", "set", "uuid", "inet4", "inet6":
		// ENUM and SET (and MariaDB's UUID and INET types) travel as binlog
		// type STRING with the real type in the metadata.
		return "string"
	case "tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob", "json":
		return "blob"
	case "datetime", "timestamp", "date":
		return "time"
	}
	return "other"
}

func compatible(binlogType byte, dataType string) bool {
	return binlogClass(binlogType) == dataTypeClass(dataType)
}

// Columns is how many values a row of the table map l was made for has. A
// row of another count is no row of that table as the relay maps it: the
// binlog is corrupt, or its rows event disagrees with its table map, and
// which value belongs to which column cannot be known. The reader stops at
// such a row (TestMachine_RowCountMismatchStops) rather than dead-letter an
// entry without its data and move its position past it.
func (l Layout) Columns() int { return l.columnCount }

// Event turns one binlog row of l's table map into an Event, by the rules of
// package eventrow. Strings are copied: go-mysql's alias the event's bytes,
// and one short string would keep a whole event alive. The payload and the
// headers are not (eventrow.ToTextBytesShared): they are most of a row's
// bytes, and go-mysql allocates each event afresh. Problems with the row's content do
// not fail the decoding: they mark the Event invalid, and it goes to the
// dead-letter stream with the reason. A row of another count than Columns
// is the caller's to refuse; Event marks it invalid rather than read past it.
func (l Layout) Event(row []any) outbox.Event {
	if len(row) != l.columnCount {
		return outbox.Event{Invalid: fmt.Sprintf("row has %d values, the table map %d columns", len(row), l.columnCount)}
	}
	var b eventrow.Builder
	id, ok := eventrow.ToUint64(row[l.id])
	if !ok {
		b.Problem(fmt.Sprintf("id %v is not an unsigned integer", row[l.id]))
	}
	b.ID(id)
	// Text columns become UTF-8, as poll mode's utf8mb4 connection
	// delivers them.
	tc := &l.text
	if l.messageID >= 0 {
		b.Charset(schema.ColMessageID, tc.messageID)
		b.MessageID(eventrow.ToText(row[l.messageID], tc.messageID))
	} else {
		b.MessageIDFromID()
	}
	if l.aggregateType >= 0 {
		b.Charset(schema.ColAggregateType, tc.aggregateType)
		b.AggregateType(eventrow.ToText(row[l.aggregateType], tc.aggregateType))
	}
	b.Charset(schema.ColAggregateID, tc.aggregateID)
	b.AggregateID(eventrow.ToText(row[l.aggregateID], tc.aggregateID))
	b.Charset(schema.ColEventType, tc.eventType)
	b.EventType(eventrow.ToText(row[l.eventType], tc.eventType))
	b.Charset(schema.ColPayload, tc.payload)
	b.Payload(eventrow.ToTextBytesShared(row[l.payload], tc.payload))
	if l.headers >= 0 {
		b.Charset(schema.ColHeaders, tc.headers)
		h, _ := eventrow.ToTextBytesShared(row[l.headers], tc.headers)
		b.Headers(h)
	}
	for _, f := range l.fields {
		var v any
		if f.index >= 0 {
			v = unsignedValue(row[f.index], f.unsigned)
			if f.text.Converts() || f.text.Unsupported() {
				b.Charset(f.name, f.text)
				if s, ok := eventrow.ToText(v, f.text); ok {
					v = s
				}
			}
		}
		b.Field(f.name, v)
	}
	// The syncer renders DATETIME and TIMESTAMP as text; an INT or BIGINT
	// column holds Unix seconds (Laravel's jobs.available_at, INT UNSIGNED,
	// which the syncer decodes as signed for want of signedness in the
	// table map). Anything else is no time: the row is a dead letter.
	occurred := row[l.occurredAt]
	switch x := occurred.(type) {
	case string, time.Time:
	case int32:
		occurred = int64(uint32(x))
	case int64:
	case uint32:
		occurred = int64(x)
	case uint64:
		occurred = int64(x)
	default:
		occurred = nil
	}
	b.OccurredAt(occurred)
	return b.Event()
}

// SkippedColumn returns the logical name and the position (from 1) of the
// first column the relay reads that skipped (the columns a row image left
// out: binlog_row_image=MINIMAL or NOBLOB in the writing session) holds, or
// ok false. Such a row is not in the binlog whole: a missing value is
// neither NULL nor the column's default, and an event made of it would be
// invented (TestRun_RowImageWithoutColumnsStops).
func (l Layout) SkippedColumn(skipped []int) (name string, pos int, ok bool) {
	for _, i := range skipped {
		for _, c := range []struct {
			name  string
			index int
		}{
			{schema.ColID, l.id}, {schema.ColMessageID, l.messageID}, {schema.ColAggregateType, l.aggregateType},
			{schema.ColAggregateID, l.aggregateID}, {schema.ColEventType, l.eventType}, {schema.ColPayload, l.payload},
			{schema.ColHeaders, l.headers}, {schema.ColOccurredAt, l.occurredAt},
		} {
			if c.index == i {
				return c.name, i + 1, true
			}
		}
		for _, f := range l.fields {
			if f.index == i {
				return f.name, i + 1, true
			}
		}
	}
	return "", 0, false
}

// unsignedValue reads the value of an UNSIGNED integer column that the syncer
// decoded as signed, for want of signedness in the table map: the bits are
// the value, in the column's width (MEDIUMINT's 24 bits come sign-extended to
// 32). typ is the column's binlog type code, 0 for a value to keep as it is.
func unsignedValue(v any, typ byte) any {
	if typ == 0 {
		return v
	}
	switch x := v.(type) {
	case int8:
		return uint64(uint8(x))
	case int16:
		return uint64(uint16(x))
	case int32:
		if typ == mysql.MYSQL_TYPE_INT24 {
			return uint64(uint32(x) & 0xFFFFFF)
		}
		return uint64(uint32(x))
	case int64:
		return uint64(x)
	}
	return v
}
