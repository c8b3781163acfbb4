package binlogrow

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/replication"
)

// tableMetas decodes the optional metadata of table maps (what
// binlog_row_metadata=FULL adds: column names, signedness, character sets,
// ENUM and SET values, the primary key) for the followed tables only, and
// once per distinct table map rather than once per transaction.
//
// go-mysql decodes it inside TableMapEvent.Decode, for every table map of
// every transaction, ignored tables included, into fresh slices: about a
// twentieth of the reader's CPU on single-row catch-up (pprof). Its
// hook, TableMapOptionalMetaDecodeFunc, replaces that decoding but is given
// the bytes only, not the event. stash keeps the bytes; complete finds the
// ones of a table map by where they lie: they start right after its
// NullBitmap, in the same event buffer. The rows decode function completes
// the table map of a followed table before its rows are decoded, on
// go-mysql's parsing goroutine, so the reader's machine, which reads a table map's
// columns only through the rows events handed to it after that, never sees
// one incomplete. A table map that nothing completes keeps its optional
// fields empty: its table is not followed.
//
// A compressed transaction parses all its inner events before any is
// handled, so several table maps can wait at once: pending holds those of
// the statement being parsed, and the end of a statement, where go-mysql
// forgets its table maps too, empties it.
//
// It is not safe for concurrent use: go-mysql calls both hooks on its one
// parsing goroutine (PayloadDecoderConcurrency is 1).
type tableMetas struct {
	pending [][]byte
	// last is the table map completed last and lastData the bytes it was
	// completed from: a table map with the same bytes and column count
	// shares its decoded fields, which nothing modifies.
	last     *replication.TableMapEvent
	lastData []byte
}

// maxPendingMetas bounds the table maps of one statement that wait for
// their rows. A statement maps each table it writes once, and MySQL joins at
// most 61; the bound only keeps a binlog that never ends a statement from
// holding its events without limit.
const maxPendingMetas = 1 << 14

// errTooManyTableMaps stops a statement with more table maps than
// maxPendingMetas: dropping one would leave a followed table's rows
// without their column names, to be mapped by position without a word. No
// server writes such a statement; a binlog whose rows events go-mysql
// cannot parse (so that none ends a statement) could look like one.
var errTooManyTableMaps = errors.New("more than 16384 table maps without a rows event that ends their statement")

// stash is the TableMapOptionalMetaDecodeFunc: it keeps the optional
// metadata of a table map for complete.
func (m *tableMetas) stash(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if len(m.pending) >= maxPendingMetas {
		return errTooManyTableMaps
	}
	m.pending = append(m.pending, data)
	return nil
}

// statementEnd forgets the table maps of the statement that ended.
func (m *tableMetas) statementEnd() {
	clear(m.pending)
	m.pending = m.pending[:0]
}

// complete fills in the optional metadata of tm, unless it has none or was
// completed already.
func (m *tableMetas) complete(tm *replication.TableMapEvent) error {
	at := metaStart(tm)
	if at == nil {
		return nil
	}
	i := -1
	for j, data := range m.pending {
		if &data[0] == at {
			i = j
			break
		}
	}
	if i < 0 {
		return nil
	}
	data := m.pending[i]
	m.pending[i] = m.pending[len(m.pending)-1]
	m.pending[len(m.pending)-1] = nil
	m.pending = m.pending[:len(m.pending)-1]
	if m.last != nil && m.last.ColumnCount == tm.ColumnCount && bytes.Equal(data, m.lastData) {
		copyOptionalMeta(tm, m.last)
		return nil
	}
	if err := decodeOptionalMeta(tm, data); err != nil {
		return fmt.Errorf("table map of %s.%s: optional metadata: %w", tm.Schema, tm.Table, err)
	}
	m.last, m.lastData = tm, data
	return nil
}

// metaStart returns where tm's optional metadata starts in its event's
// buffer: the byte after its NullBitmap, nil when the buffer ends there.
func metaStart(tm *replication.TableMapEvent) *byte {
	nb := tm.NullBitmap
	if len(nb) == cap(nb) {
		return nil
	}
	return &nb[:len(nb)+1][len(nb)]
}

// copyOptionalMeta gives dst the optional metadata fields of src.
func copyOptionalMeta(dst, src *replication.TableMapEvent) {
	dst.SignednessBitmap = src.SignednessBitmap
	dst.DefaultCharset = src.DefaultCharset
	dst.ColumnCharset = src.ColumnCharset
	dst.ColumnName = src.ColumnName
	dst.SetStrValue = src.SetStrValue
	dst.EnumStrValue = src.EnumStrValue
	dst.GeometryType = src.GeometryType
	dst.PrimaryKey = src.PrimaryKey
	dst.PrimaryKeyPrefix = src.PrimaryKeyPrefix
	dst.EnumSetDefaultCharset = src.EnumSetDefaultCharset
	dst.EnumSetColumnCharset = src.EnumSetColumnCharset
	dst.VisibilityBitmap = src.VisibilityBitmap
}

// errMetaTruncated is optional metadata that ends inside a field, where
// go-mysql would index past its end.
var errMetaTruncated = errors.New("truncated")

// errTooManyValues is an ENUM or SET column with more than maxStrValues
// values, which go-mysql would read (as empty strings, allocating for
// each) and the reader refuses.
var errTooManyValues = errors.New("more values than MySQL allows")

// maxStrValues bounds the values of one ENUM or SET column: MySQL allows
// 65,535 ENUM members and 64 SET members.
const maxStrValues = 1 << 16

// decodeOptionalMeta decodes the type-length-value fields of a table map's
// optional metadata into tm as go-mysql's TableMapEvent.decodeOptionalMeta
// does: the same fields, slices of data as go-mysql's are, a later field of
// a type replacing an earlier one (the primary key's adding to it), types
// it does not know skipped. Where go-mysql would panic on bytes that end
// early it returns an error; FuzzTableMetas holds the two to each other.
func decodeOptionalMeta(tm *replication.TableMapEvent, data []byte) error {
	pos := 0
	for pos < len(data) {
		t := data[pos]
		pos++
		l, n, err := metaInt(data[pos:])
		if err != nil {
			return fmt.Errorf("field %d: length: %w", t, err)
		}
		pos += n
		if l > uint64(len(data)-pos) {
			return fmt.Errorf("field %d: %d bytes, %d left: %w", t, l, len(data)-pos, errMetaTruncated)
		}
		v := data[pos : pos+int(l)]
		pos += int(l)
		switch t {
		case replication.TABLE_MAP_OPT_META_SIGNEDNESS:
			tm.SignednessBitmap = v
		case replication.TABLE_MAP_OPT_META_DEFAULT_CHARSET:
			tm.DefaultCharset, err = metaDefaultCharset(v)
		case replication.TABLE_MAP_OPT_META_COLUMN_CHARSET:
			tm.ColumnCharset, err = metaInts(v)
		case replication.TABLE_MAP_OPT_META_COLUMN_NAME:
			tm.ColumnName, err = metaColumnNames(v, tm.ColumnCount)
		case replication.TABLE_MAP_OPT_META_SET_STR_VALUE:
			tm.SetStrValue, err = metaStrValues(v)
		case replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE:
			tm.EnumStrValue, err = metaStrValues(v)
		case replication.TABLE_MAP_OPT_META_GEOMETRY_TYPE:
			tm.GeometryType, err = metaInts(v)
		case replication.TABLE_MAP_OPT_META_SIMPLE_PRIMARY_KEY:
			err = metaPrimaryKey(tm, v, false)
		case replication.TABLE_MAP_OPT_META_PRIMARY_KEY_WITH_PREFIX:
			err = metaPrimaryKey(tm, v, true)
		case replication.TABLE_MAP_OPT_META_ENUM_AND_SET_DEFAULT_CHARSET:
			tm.EnumSetDefaultCharset, err = metaDefaultCharset(v)
		case replication.TABLE_MAP_OPT_META_ENUM_AND_SET_COLUMN_CHARSET:
			tm.EnumSetColumnCharset, err = metaInts(v)
		case replication.TABLE_MAP_OPT_META_COLUMN_VISIBILITY:
			tm.VisibilityBitmap = v
		}
		if err != nil {
			return fmt.Errorf("field %d: %w", t, err)
		}
	}
	return nil
}

// metaInt reads a length-encoded integer as mysql.LengthEncodedInt does
// (nothing left reads as 0 of 0 bytes, NULL as 0), with an error where that
// would read past the end.
func metaInt(b []byte) (v uint64, n int, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	switch b[0] {
	case 0xfb:
		return 0, 1, nil
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	default:
		return uint64(b[0]), 1, nil
	}
	if len(b) < n {
		return 0, 0, errMetaTruncated
	}
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, n, nil
}

// metaInts reads a sequence of length-encoded integers.
func metaInts(v []byte) ([]uint64, error) {
	var out []uint64
	for p := 0; p < len(v); {
		i, n, err := metaInt(v[p:])
		if err != nil {
			return nil, err
		}
		p += n
		out = append(out, i)
	}
	return out, nil
}

// metaDefaultCharset reads a default charset and its exceptions: a
// collation, then pairs of column and collation.
func metaDefaultCharset(v []byte) ([]uint64, error) {
	out, err := metaInts(v)
	if err != nil {
		return nil, err
	}
	if len(out)%2 != 1 {
		return nil, fmt.Errorf("expect an odd number of items in the default charset, got %d", len(out))
	}
	return out, nil
}

// metaColumnNames reads count names, each a length byte and its bytes.
func metaColumnNames(v []byte, count uint64) ([][]byte, error) {
	names := make([][]byte, 0, count)
	for p := 0; p < len(v); {
		n := int(v[p])
		p++
		if n > len(v)-p {
			return nil, fmt.Errorf("column name %d: %w", len(names), errMetaTruncated)
		}
		names = append(names, v[p:p+n])
		p += n
	}
	if uint64(len(names)) != count {
		return nil, fmt.Errorf("expect %d column names, got %d", count, len(names))
	}
	return names, nil
}

// metaStrValues reads the ENUM or SET values of columns: per column a count,
// then that many length-encoded strings. As go-mysql's, a count beyond the
// bytes left reads empty strings for the rest.
func metaStrValues(v []byte) ([][][]byte, error) {
	var out [][][]byte
	for p := 0; p < len(v); {
		count, n, err := metaInt(v[p:])
		if err != nil {
			return nil, err
		}
		p += n
		if count > maxStrValues {
			return nil, fmt.Errorf("%d values in one column: %w", count, errTooManyValues)
		}
		vals := make([][]byte, 0, int(count))
		for range count {
			l, n, err := metaInt(v[p:])
			if err != nil {
				return nil, err
			}
			if l > uint64(len(v)-p-n) {
				return nil, fmt.Errorf("value of %d bytes: %w", l, errMetaTruncated)
			}
			end := p + n + int(l)
			vals = append(vals, v[p+n:end:end])
			p = end
		}
		out = append(out, vals)
	}
	return out, nil
}

// metaPrimaryKey adds the primary key's columns to tm, with their prefix
// lengths (0 without withPrefix).
func metaPrimaryKey(tm *replication.TableMapEvent, v []byte, withPrefix bool) error {
	for p := 0; p < len(v); {
		col, n, err := metaInt(v[p:])
		if err != nil {
			return err
		}
		p += n
		var prefix uint64
		if withPrefix {
			if prefix, n, err = metaInt(v[p:]); err != nil {
				return err
			}
			p += n
		}
		tm.PrimaryKey = append(tm.PrimaryKey, col)
		tm.PrimaryKeyPrefix = append(tm.PrimaryKeyPrefix, prefix)
	}
	return nil
}
