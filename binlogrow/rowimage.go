package binlogrow

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"reflect"
	"slices"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-mysql-org/go-mysql/utils"
)

// imageDecoder decodes the rows of the INSERTs of followed tables on
// go-mysql's parsing goroutine, in place of RowsEvent.DecodeData, into the
// very values DecodeData gives (the decodeConfig settings: no parseTime,
// DECIMAL as text, TIMESTAMP in UTC): every row of the outbox table is
// decoded, and go-mysql spends on each a map of the columns' signedness,
// an fmt.Sprintf per DATETIME and a time.Format per TIMESTAMP, which were
// a tenth of the relay's CPU in single-row catch-up (pprof of
// binlog-outbox-bench --workloads single).
//
// It decodes integers, floats, strings, blobs, DATETIME(n) and
// TIMESTAMP(n) itself. A value of any other type it knows the length of
// (DECIMAL, MySQL's JSON, BIT, ENUM, SET, TIME, DATE, the old temporal
// types) it has go-mysql decode, one column at a time. For anything else
// (an unknown type code, a compressed or non-INSERT event, a row image that
// does not parse) it returns false and the caller lets DecodeData decode
// the whole event: its result, or its error, is then go-mysql's own.
// FuzzImageDecoder holds the two equal on random table maps and images.
//
// It is not safe for concurrent use: the parser calls its decode function
// on one goroutine.
type imageDecoder struct {
	// The table map the plan was made for, by value: the parser's table
	// maps alias its packet buffer.
	count     uint64
	types     []byte
	meta      []uint16
	signed    []byte
	cols      []imageColumn
	single    *replication.TableMapEvent // one-column table map for go-mysql's decoding of a value
	oneBitmap []byte
}

// imageColumn is how one column's values decode.
type imageColumn struct {
	kind     imageKind
	typ      byte
	meta     uint16
	unsigned bool
	width    int // byte length of a fixed-width value; the length bytes of a string or blob
}

type imageKind uint8

const (
	kindUnknown    imageKind = iota // no length known: the event goes to DecodeData
	kindGoMySQL                     // fixed length (width) or computed by valueLength: decoded by go-mysql
	kindNull                        // MYSQL_TYPE_NULL: nil, no bytes
	kindInt                         // width 1, 2, 3, 4, 8
	kindFloat                       // FLOAT
	kindDouble                      // DOUBLE
	kindYear                        // YEAR: int
	kindString                      // width 1 or 2 length bytes, then the bytes, as a string
	kindBlob                        // width 1-4 length bytes, then the bytes, as []byte
	kindDatetime2                   // meta: fractional digits (0-6)
	kindTimestamp2                  // meta: fractional digits (0-6)
)

// compressedField is the index of RowsEvent's unexported compressed flag:
// the parser hands MariaDB's compressed row events to the decode function
// still compressed, and nothing exported tells them from plain ones. -1
// when go-mysql has no such field (another version): then imageDecoder
// leaves every event to DecodeData.
var compressedField = func() int {
	f, ok := reflect.TypeFor[replication.RowsEvent]().FieldByName("compressed")
	if !ok || f.Type.Kind() != reflect.Bool || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}()

// decode decodes the rows of ev, whose header DecodeHeader read up to pos
// of data, and reports whether it did; on false ev's rows are untouched
// and DecodeData must decode them.
func (d *imageDecoder) decode(ev *replication.RowsEvent, pos int, data []byte) bool {
	if !d.planned(ev) {
		return false
	}
	// Most events hold one row: its slices come in one allocation.
	one := new(struct {
		rows    [1][]any
		skipped [1][]int
	})
	rows, skipped := one.rows[:0], one.skipped[:0]
	for pos < len(data) {
		row, skips, n, ok := d.image(ev, data[pos:])
		if !ok || n == 0 {
			return false
		}
		rows, skipped = append(rows, row), append(skipped, skips)
		pos += n
	}
	ev.Rows, ev.SkippedColumns = rows, skipped
	return true
}

// planned reports whether ev's images are the decoder's to read: an
// uncompressed INSERT whose table map it has a plan for (plan).
func (d *imageDecoder) planned(ev *replication.RowsEvent) bool {
	if compressedField < 0 || ev.Type() != replication.EnumRowsEventTypeInsert || ev.Table == nil ||
		reflect.ValueOf(ev).Elem().Field(compressedField).Bool() {
		return false
	}
	tm := ev.Table
	if ev.ColumnCount != tm.ColumnCount || len(tm.ColumnType) != int(tm.ColumnCount) || len(tm.ColumnMeta) != int(tm.ColumnCount) {
		return false
	}
	d.plan(tm)
	return d.cols != nil
}

// walk reads the row images of ev, whose header DecodeHeader read up to
// pos of data, as decode does, without decoding their values: ev gets each
// row's skipped columns and no Rows (Walked). An image that decode would
// leave to DecodeData because it does not parse makes walk return false,
// with ev untouched: then the rows are decoded, and DecodeData's error
// stops the reader as it would have. A value go-mysql decodes itself
// (kindGoMySQL: JSON, DECIMAL, ...) is only measured, so an error in its
// bytes shows when the rows are decoded.
func (d *imageDecoder) walk(ev *replication.RowsEvent, pos int, data []byte) bool {
	if !d.planned(ev) {
		return false
	}
	// Every image of an INSERT has the same columns (ColumnBitmap1), so
	// every row shares one list of the skipped ones.
	bitmap := ev.ColumnBitmap1
	var skips []int
	for i := range int(ev.ColumnCount) {
		if bitmap[i>>3]&(1<<(i&7)) == 0 {
			skips = append(skips, i)
		}
	}
	var skipped [][]int
	for pos < len(data) {
		n, ok := d.imageLength(ev, data[pos:])
		if !ok || n == 0 {
			return false
		}
		skipped = append(skipped, skips)
		pos += n
	}
	ev.Rows, ev.SkippedColumns = nil, skipped
	return true
}

// Walked reports whether the rows of ev were walked, not decoded
// (DecodeConfigWalking): it has images, each with its skipped columns in
// SkippedColumns, but no values.
func Walked(ev *replication.RowsEvent) bool {
	return len(ev.Rows) == 0 && len(ev.SkippedColumns) > 0
}

// imageLength is the length of the row image at the start of data, read
// as image reads it.
func (d *imageDecoder) imageLength(ev *replication.RowsEvent, data []byte) (int, bool) {
	count, bitmap := int(ev.ColumnCount), ev.ColumnBitmap1
	nulls := (presentColumns(bitmap, count) + 7) / 8
	if len(data) < nulls {
		return 0, false
	}
	nullBitmap, pos := data[:nulls], nulls
	n := 0 // index among the present columns
	for i := range count {
		if bitmap[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		null := nullBitmap[n>>3]&(1<<(n&7)) != 0
		n++
		if null {
			continue
		}
		size, ok := d.valueLength(&d.cols[i], data[pos:])
		if !ok {
			return 0, false
		}
		pos += size
	}
	return pos, true
}

// valueLength is the length of the value of column c at the start of
// data, as value reads it.
func (d *imageDecoder) valueLength(c *imageColumn, data []byte) (int, bool) {
	switch c.kind {
	case kindNull:
		return 0, true
	case kindGoMySQL:
		realType := c.typ
		if realType == mysql.MYSQL_TYPE_STRING {
			realType, _ = stringType(c.meta)
		}
		n, ok := valueLength(realType, c.meta, data)
		return n, ok && len(data) >= n
	case kindString, kindBlob:
		return prefixedEnd(c, data)
	}
	return c.width, len(data) >= c.width
}

// prefixedEnd is where the string or blob value of column c at the start
// of data ends: its length bytes, then as many bytes as they say.
func prefixedEnd(c *imageColumn, data []byte) (int, bool) {
	if len(data) < c.width {
		return 0, false
	}
	var length int
	if c.kind == kindString && c.width == 1 {
		length = int(data[0])
	} else {
		length = int(mysql.FixedLengthInt(data[:c.width]))
	}
	end := c.width + length
	return end, len(data) >= end
}

// plan makes the columns' plan for tm, unless the last one fits it; cols is
// nil when a column has a type of unknown length.
func (d *imageDecoder) plan(tm *replication.TableMapEvent) {
	if d.types != nil && tm.ColumnCount == d.count && bytes.Equal(tm.ColumnType, d.types) &&
		slices.Equal(tm.ColumnMeta, d.meta) && bytes.Equal(tm.SignednessBitmap, d.signed) {
		return
	}
	d.count, d.types, d.meta = tm.ColumnCount, bytes.Clone(tm.ColumnType), slices.Clone(tm.ColumnMeta)
	d.signed = bytes.Clone(tm.SignednessBitmap)
	if d.types == nil {
		d.types = []byte{}
	}
	unsigned := tm.UnsignedMap()
	d.cols = make([]imageColumn, tm.ColumnCount)
	for i := range d.cols {
		c := planColumn(tm.ColumnType[i], tm.ColumnMeta[i])
		if c.kind == kindUnknown {
			d.cols = nil
			return
		}
		c.unsigned = unsigned[i]
		d.cols[i] = c
	}
}

// planColumn says how values of binlog type typ with metadata meta decode,
// as RowsEvent.decodeValue reads them.
func planColumn(typ byte, meta uint16) imageColumn {
	c := imageColumn{typ: typ, meta: meta}
	realType, length := typ, 0
	if typ == mysql.MYSQL_TYPE_STRING {
		// CHAR, ENUM and SET: the metadata holds the real type and the
		// length, in a packing of their own.
		realType, length = stringType(meta)
	}
	if f, ok := fixedWidth[realType]; ok {
		c.kind, c.width = f.kind, f.width
	}
	switch realType {
	case mysql.MYSQL_TYPE_NULL:
		c.kind = kindNull
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		c.kind, c.width = kindString, stringLengthBytes(int(meta))
	case mysql.MYSQL_TYPE_STRING:
		c.kind, c.width = kindString, stringLengthBytes(length)
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR:
		if meta >= 1 && meta <= 4 {
			c.kind, c.width = kindBlob, int(meta)
		}
	case mysql.MYSQL_TYPE_DATETIME2:
		if meta <= 6 {
			c.kind, c.width = kindDatetime2, 5+int(meta+1)/2
		}
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		if meta <= 6 {
			c.kind, c.width = kindTimestamp2, 4+int(meta+1)/2
		}
	}
	if c.kind == kindUnknown {
		if _, ok := valueLength(realType, meta, nil); ok {
			c.kind = kindGoMySQL
		}
	}
	return c
}

// fixedWidth are the types planColumn decodes whose values have one length
// whatever their metadata: how they decode, and that length.
var fixedWidth = map[byte]struct {
	kind  imageKind
	width int
}{
	mysql.MYSQL_TYPE_TINY: {kindInt, 1}, mysql.MYSQL_TYPE_SHORT: {kindInt, 2}, mysql.MYSQL_TYPE_INT24: {kindInt, 3},
	mysql.MYSQL_TYPE_LONG: {kindInt, 4}, mysql.MYSQL_TYPE_LONGLONG: {kindInt, 8},
	mysql.MYSQL_TYPE_FLOAT: {kindFloat, 4}, mysql.MYSQL_TYPE_DOUBLE: {kindDouble, 8}, mysql.MYSQL_TYPE_YEAR: {kindYear, 1},
}

// stringType unpacks the metadata of a MYSQL_TYPE_STRING column as
// decodeValue does: the real type (STRING, ENUM or SET) and the length.
func stringType(meta uint16) (byte, int) {
	if meta < 256 {
		return mysql.MYSQL_TYPE_STRING, int(meta)
	}
	b0, b1 := uint8(meta>>8), uint8(meta&0xFF)
	if b0&0x30 != 0x30 {
		return b0 | 0x30, int(uint16(b1) | (uint16((b0&0x30)^0x30) << 4))
	}
	return b0, int(meta & 0xFF)
}

func stringLengthBytes(length int) int {
	if length < 256 {
		return 1
	}
	return 2
}

// valueLength returns the byte length of a value of real type typ that
// go-mysql decodes, read from data where it says so itself; with nil data
// only whether the type's length is known. ok is false for a type whose
// length it does not know, or data too short to say.
func valueLength(typ byte, meta uint16, data []byte) (int, bool) {
	switch typ {
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		prec, scale := int(meta>>8), int(meta&0xFF)
		if scale > prec {
			return 0, false
		}
		compressed := [...]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}
		integral := prec - scale
		n := integral/9*4 + compressed[integral%9] + scale/9*4 + compressed[scale%9]
		return n, n > 0
	case mysql.MYSQL_TYPE_JSON:
		if meta < 1 || meta > 4 {
			return 0, false
		}
		if data == nil {
			return 0, true
		}
		if len(data) < int(meta) {
			return 0, false
		}
		return int(mysql.FixedLengthInt(data[:meta])) + int(meta), true
	case mysql.MYSQL_TYPE_BIT:
		nbits := int(meta>>8)*8 + int(meta&0xFF)
		return (nbits + 7) / 8, true
	case mysql.MYSQL_TYPE_ENUM:
		l := int(meta & 0xFF)
		return l, l == 1 || l == 2
	case mysql.MYSQL_TYPE_SET:
		return int(meta & 0xFF), true
	case mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_DATE:
		return 3, true
	case mysql.MYSQL_TYPE_TIME2:
		return 3 + int(meta+1)/2, meta <= 6
	case mysql.MYSQL_TYPE_DATETIME:
		return 8, true
	case mysql.MYSQL_TYPE_TIMESTAMP:
		return 4, true
	}
	return 0, false
}

// image decodes one row image at the start of data as decodeImage does
// and returns its values, its skipped columns and its length.
func (d *imageDecoder) image(ev *replication.RowsEvent, data []byte) ([]any, []int, int, bool) {
	count := int(ev.ColumnCount)
	bitmap := ev.ColumnBitmap1
	present := presentColumns(bitmap, count)
	nulls := (present + 7) / 8
	if len(data) < nulls {
		return nil, nil, 0, false
	}
	nullBitmap, pos := data[:nulls], nulls
	row := make([]any, count)
	skips := make([]int, 0, count-present)
	n := 0 // index among the present columns
	for i := range count {
		if bitmap[i>>3]&(1<<(i&7)) == 0 {
			skips = append(skips, i)
			continue
		}
		null := nullBitmap[n>>3]&(1<<(n&7)) != 0
		n++
		if null {
			continue
		}
		v, size, ok := d.value(ev, &d.cols[i], data[pos:])
		if !ok {
			return nil, nil, 0, false
		}
		row[i] = v
		pos += size
	}
	return row, skips, pos, true
}

// presentColumns counts the columns of the first count bits of bitmap:
// those a row image has.
func presentColumns(bitmap []byte, count int) int {
	present := 0
	for _, b := range bitmap[:count/8] {
		present += bits.OnesCount8(b)
	}
	if count%8 != 0 {
		present += bits.OnesCount8(bitmap[count/8] & byte(1<<(count%8)-1))
	}
	return present
}

// value decodes one value of column c at the start of data.
func (d *imageDecoder) value(ev *replication.RowsEvent, c *imageColumn, data []byte) (any, int, bool) {
	if c.kind == kindNull {
		return nil, 0, true
	}
	if c.kind == kindGoMySQL {
		return d.goMySQLValue(ev, c, data)
	}
	if len(data) < c.width {
		return nil, 0, false
	}
	switch c.kind {
	case kindInt:
		return intValue(data, c.width, c.unsigned), c.width, true
	case kindFloat:
		return mysql.ParseBinaryFloat32(data), 4, true
	case kindDouble:
		return mysql.ParseBinaryFloat64(data), 8, true
	case kindYear:
		if data[0] == 0 {
			return 0, 1, true
		}
		return int(data[0]) + 1900, 1, true
	case kindString, kindBlob:
		end, ok := prefixedEnd(c, data)
		if !ok {
			return nil, 0, false
		}
		if c.kind == kindString {
			return utils.ByteSliceToString(data[c.width:end]), end, true
		}
		return data[c.width:end], end, true
	case kindDatetime2:
		s, ok := datetime2(data, int(c.meta))
		return s, c.width, ok
	case kindTimestamp2:
		return timestamp2(data, int(c.meta)), c.width, true
	}
	return nil, 0, false
}

func intValue(data []byte, width int, unsigned bool) any {
	switch width {
	case 1:
		if unsigned {
			return data[0]
		}
		return int8(data[0])
	case 2:
		if unsigned {
			return mysql.ParseBinaryUint16(data)
		}
		return mysql.ParseBinaryInt16(data)
	case 3:
		if unsigned {
			return mysql.ParseBinaryUint24(data)
		}
		return mysql.ParseBinaryInt24(data)
	case 4:
		if unsigned {
			return mysql.ParseBinaryUint32(data)
		}
		return mysql.ParseBinaryInt32(data)
	}
	if unsigned {
		return mysql.ParseBinaryUint64(data)
	}
	return mysql.ParseBinaryInt64(data)
}

// goMySQLValue has go-mysql decode one value of c, by a table map of that
// column alone: the value's bytes, behind a null bitmap, make a row image
// of its own, which DecodeData decodes with ev's settings. The bytes are a
// copy, so a decoded value that aliases them aliases nothing of the event.
func (d *imageDecoder) goMySQLValue(ev *replication.RowsEvent, c *imageColumn, data []byte) (any, int, bool) {
	realType := c.typ
	if realType == mysql.MYSQL_TYPE_STRING {
		realType, _ = stringType(c.meta)
	}
	n, ok := valueLength(realType, c.meta, data)
	if !ok || len(data) < n {
		return nil, 0, false
	}
	if d.single == nil {
		d.single = &replication.TableMapEvent{ColumnCount: 1, ColumnType: make([]byte, 1), ColumnMeta: make([]uint16, 1)}
		d.oneBitmap = []byte{1}
	}
	d.single.ColumnType[0], d.single.ColumnMeta[0] = c.typ, c.meta
	image := make([]byte, 1+n)
	copy(image[1:], data[:n])
	table, count, bitmap := ev.Table, ev.ColumnCount, ev.ColumnBitmap1
	ev.Table, ev.ColumnCount, ev.ColumnBitmap1 = d.single, 1, d.oneBitmap
	err := ev.DecodeData(0, image)
	rows := ev.Rows
	ev.Table, ev.ColumnCount, ev.ColumnBitmap1 = table, count, bitmap
	ev.Rows, ev.SkippedColumns = nil, nil
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 {
		return nil, 0, false
	}
	return rows[0][0], n, true
}

// datetime2 renders a DATETIME(dec) value as decodeDatetime2 does without
// parseTime (through fmt.Sprintf there); ok is false for a field it would
// render negative, which it leaves to go-mysql.
func datetime2(data []byte, dec int) (string, bool) {
	intPart := int64(beUint(data[:5])) - 0x8000000000
	frac := fracMicros(data[5:], dec)
	var b [32]byte
	if intPart == 0 {
		return zeroTime(b[:0], int(frac), dec), true
	}
	tmp := intPart<<24 + frac
	if tmp < 0 {
		tmp = -tmp
	}
	ymdhms := tmp >> 24
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	ym := ymd >> 5
	year, month, day := int(ym/13), int(ym%13), int(ymd%(1<<5))
	hour, minute, second := int(hms>>12), int((hms>>6)%(1<<6)), int(hms%(1<<6))
	if year < 0 || hour < 0 || tmp < 0 {
		return "", false
	}
	return string(datetimeText(b[:0], year, month, day, hour, minute, second, int(frac), dec)), true
}

// fracMicros reads the fractional seconds of a DATETIME2 or TIMESTAMP2
// value with dec digits, which data begins with, as microseconds.
func fracMicros(data []byte, dec int) int64 {
	switch dec {
	case 1, 2:
		return int64(data[0]) * 10000
	case 3, 4:
		return int64(binary.BigEndian.Uint16(data[:2])) * 100
	case 5, 6:
		return int64(beUint(data[:3]))
	}
	return 0
}

// timestamp2 renders a TIMESTAMP(dec) value as decodeTimestamp2 and
// fracTime.String do, in UTC (the decodeConfig's TimestampStringLocation).
func timestamp2(data []byte, dec int) string {
	sec := int64(binary.BigEndian.Uint32(data[:4]))
	usec := fracMicros(data[4:], dec)
	var b [32]byte
	if sec == 0 {
		return zeroTime(b[:0], int(usec), dec)
	}
	// time.Unix carries microseconds past a second into the seconds, as
	// go-mysql's does.
	t := time.Unix(sec, usec*1000).UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	out := datetimeText(b[:0], year, int(month), day, hour, minute, second, 0, 0)
	if dec > 0 {
		// time.Format's .000000 cuts the nanoseconds to dec digits.
		out = append(out, '.')
		out = appendPadded(out, t.Nanosecond()/pow10[9-dec], dec)
	}
	return string(out)
}

var pow10 = [...]int{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

// zeroTime is go-mysql's formatZeroTime.
func zeroTime(b []byte, frac, dec int) string {
	b = append(b, "0000-00-00 00:00:00"...)
	if dec == 0 {
		return string(b)
	}
	b = append(b, '.')
	b = appendPadded(b, frac, 6)
	return string(b[:len(b)-(6-dec)])
}

// datetimeText appends what go-mysql's formatDatetime renders with
// "%04d-%02d-%02d %02d:%02d:%02d" and, when dec > 0, ".%06d" cut by 6-dec
// characters at the end. The fields are not negative.
func datetimeText(b []byte, year, month, day, hour, minute, second, frac, dec int) []byte {
	b = appendPadded(b, year, 4)
	b = append(b, '-')
	b = appendPadded(b, month, 2)
	b = append(b, '-')
	b = appendPadded(b, day, 2)
	b = append(b, ' ')
	b = appendPadded(b, hour, 2)
	b = append(b, ':')
	b = appendPadded(b, minute, 2)
	b = append(b, ':')
	b = appendPadded(b, second, 2)
	if dec > 0 {
		b = append(b, '.')
		b = appendPadded(b, frac, 6)
		b = b[:len(b)-(6-dec)]
	}
	return b
}

// appendPadded appends v (not negative) in decimal, zero-padded to width
// digits, and wider if it needs more, as fmt's %0*d does.
func appendPadded(b []byte, v, width int) []byte {
	var digits [20]byte
	i := len(digits)
	for v >= 10 || len(digits)-i < width-1 {
		i--
		digits[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	digits[i] = byte('0' + v)
	return append(b, digits[i:]...)
}

// beUint is mysql.BFixedLengthInt.
func beUint(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}
