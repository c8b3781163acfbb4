package binlogrow

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// imageColumnKinds are the column types FuzzImageDecoder picks from, with
// a metadata maker each (r: the fuzzer's next byte).
var imageColumnKinds = []struct {
	typ  byte
	meta func(r func() byte) []byte
}{
	{mysql.MYSQL_TYPE_TINY, nil}, {mysql.MYSQL_TYPE_SHORT, nil}, {mysql.MYSQL_TYPE_INT24, nil},
	{mysql.MYSQL_TYPE_LONG, nil}, {mysql.MYSQL_TYPE_LONGLONG, nil}, {mysql.MYSQL_TYPE_YEAR, nil},
	{mysql.MYSQL_TYPE_NULL, nil}, {mysql.MYSQL_TYPE_DATE, nil}, {mysql.MYSQL_TYPE_TIME, nil},
	{mysql.MYSQL_TYPE_DATETIME, nil}, {mysql.MYSQL_TYPE_TIMESTAMP, nil},
	{mysql.MYSQL_TYPE_FLOAT, func(func() byte) []byte { return []byte{4} }},
	{mysql.MYSQL_TYPE_DOUBLE, func(func() byte) []byte { return []byte{8} }},
	{mysql.MYSQL_TYPE_VARCHAR, func(r func() byte) []byte { return []byte{r(), r() % 2} }},
	{mysql.MYSQL_TYPE_VAR_STRING, func(r func() byte) []byte { return []byte{r(), r() % 2} }},
	{mysql.MYSQL_TYPE_STRING, func(r func() byte) []byte {
		return []byte{[]byte{0xfe, 0xee, 0xde, 0xce, 0xf7, 0xf8, r()}[r()%7], r()}
	}},
	{mysql.MYSQL_TYPE_BLOB, func(r func() byte) []byte { return []byte{1 + r()%5} }},
	{mysql.MYSQL_TYPE_GEOMETRY, func(r func() byte) []byte { return []byte{1 + r()%4} }},
	{mysql.MYSQL_TYPE_JSON, func(r func() byte) []byte { return []byte{1 + r()%4} }},
	{mysql.MYSQL_TYPE_DATETIME2, func(r func() byte) []byte { return []byte{r() % 8} }},
	{mysql.MYSQL_TYPE_TIMESTAMP2, func(r func() byte) []byte { return []byte{r() % 8} }},
	{mysql.MYSQL_TYPE_TIME2, func(r func() byte) []byte { return []byte{r() % 8} }},
	{mysql.MYSQL_TYPE_NEWDECIMAL, func(r func() byte) []byte { return []byte{1 + r()%65, r() % 31} }},
	{mysql.MYSQL_TYPE_BIT, func(r func() byte) []byte { return []byte{r() % 8, r() % 9} }},
}

// FuzzImageDecoder decodes random row images of random table maps with the
// reader's decoding and with go-mysql's: where go-mysql decodes, the reader
// must give the same values; where go-mysql fails, it must fail too. The
// images are random bytes behind a null bitmap, or, with framed set, values
// whose length prefixes fit their types (random contents), so that most
// rows parse.
func FuzzImageDecoder(f *testing.F) {
	fde := formatDescription(f)
	f.Add([]byte{3, 0, 4, 13, 10, 0}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, true, false)
	f.Add([]byte{9, 4, 19, 6, 20, 6, 15, 0xfe, 26, 16, 4, 18, 2, 10, 2, 22, 10, 2, 23, 3, 1, 21, 3}, []byte{}, true, true)
	f.Add([]byte{2, 15, 0xf7, 1, 19, 7}, []byte{0, 1, 0x99}, false, false)
	f.Add([]byte{5, 1, 2, 3, 4, 5, 0xff}, []byte{0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, true, true)
	f.Fuzz(func(t *testing.T, spec, contents []byte, framed, signed bool) {
		checkImageDecoder(t, fde, spec, contents, framed, signed)
	})
}

// checkImageDecoder is FuzzImageDecoder's check of one input.
func checkImageDecoder(t *testing.T, fde, spec, contents []byte, framed, signed bool) {
	{
		next := func(b *[]byte) func() byte {
			return func() byte {
				if len(*b) == 0 {
					return 0
				}
				c := (*b)[0]
				*b = (*b)[1:]
				return c
			}
		}
		r, v := next(&spec), next(&contents)
		var tb imageTable
		count := 1 + int(r()%12)
		for range count {
			k := imageColumnKinds[int(r())%len(imageColumnKinds)]
			c := imageColumnDef{typ: k.typ}
			if k.meta != nil {
				c.meta = k.meta(r)
			}
			tb.cols = append(tb.cols, c)
		}
		if signed {
			tb.signed = []byte{r(), r()}
		}
		bitmap := make([]byte, (count+7)/8)
		for i := range bitmap {
			bitmap[i] = 0xff
		}
		if r()%4 == 0 {
			// Some columns left out; not all: go-mysql loops forever on
			// an image of no columns.
			bitmap[0] = r() | 1
		}
		var image []byte
		if !framed {
			image = contents
		} else {
			for range 1 + int(r()%3) {
				image = append(image, framedImage(tb, v)...)
			}
		}
		rows := writeRowsEvent(r()%2 == 0, count, bitmap, image)
		ours, theirs, oursErr, theirsErr, fast := decodeBoth(t, fde, tb.tableMapEvent(), rows)
		if (oursErr == nil) != (theirsErr == nil) {
			t.Fatalf("error %v, go-mysql's %v", oursErr, theirsErr)
		}
		checkWalk(t, fde, tb.tableMapEvent(), rows, theirs, fast)
		if theirsErr != nil {
			return
		}
		if diff := sameRows(ours, theirs); diff != "" {
			t.Errorf("%s\n ours %#v\n go-mysql %#v", diff, ours.Rows, theirs.Rows)
		}
	}
}

// checkWalk checks the walk of rows against their decoding: what
// imageDecoder decodes it walks, and a walk finds go-mysql's rows, each
// with its skipped columns. A walk may pass images whose values go-mysql
// refuses (a value of a type it decodes itself is only measured), never
// the other way round.
func checkWalk(t *testing.T, fde, tableMap, rows []byte, theirs *replication.RowsEvent, fast bool) {
	t.Helper()
	ev, walked, err := walkRows(t, fde, tableMap, rows)
	if fast && (err != nil || !walked && len(ev.Rows) > 0) {
		t.Fatalf("decoded by imageDecoder, but not walked (error %v)", err)
	}
	if !walked || theirs == nil {
		return
	}
	if len(ev.SkippedColumns) != len(theirs.Rows) {
		t.Fatalf("walked %d rows, go-mysql decoded %d", len(ev.SkippedColumns), len(theirs.Rows))
	}
	for i, skips := range ev.SkippedColumns {
		if !slices.Equal(skips, theirs.SkippedColumns[i]) {
			t.Errorf("row %d: walked skipped columns %v, go-mysql's %v", i, skips, theirs.SkippedColumns[i])
		}
	}
}

// framedImage is a row image of every column of tb (nulls from v's bits):
// values of their types' lengths with v's bytes as contents.
func framedImage(tb imageTable, v func() byte) []byte {
	nulls := make([]byte, (len(tb.cols)+7)/8)
	var body []byte
	take := func(n int) {
		for range n {
			body = append(body, v())
		}
	}
	for i, c := range tb.cols {
		if v()%8 == 0 {
			nulls[i/8] |= 1 << (i % 8)
			continue
		}
		var meta uint16
		if len(c.meta) == 1 {
			meta = uint16(c.meta[0])
		} else if len(c.meta) == 2 {
			meta = uint16(c.meta[0])<<8 | uint16(c.meta[1])
		}
		if c.typ == mysql.MYSQL_TYPE_BIT {
			meta = binary.LittleEndian.Uint16(c.meta)
		}
		switch c.typ {
		case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
			meta = binary.LittleEndian.Uint16(c.meta)
			n := int(v() % 12)
			if meta < 256 {
				body = append(body, byte(n))
			} else {
				body = binary.LittleEndian.AppendUint16(body, uint16(n))
			}
			take(n)
		case mysql.MYSQL_TYPE_STRING:
			realType, length := stringType(meta)
			if realType == mysql.MYSQL_TYPE_STRING {
				n := int(v() % 12)
				if length < 256 {
					body = append(body, byte(n))
				} else {
					body = binary.LittleEndian.AppendUint16(body, uint16(n))
				}
				take(n)
			} else if n, ok := valueLength(realType, meta, []byte{}); ok {
				take(n)
			}
		case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON:
			n := int(v() % 12)
			if c.typ == mysql.MYSQL_TYPE_JSON && v()%2 == 0 {
				// A small valid document: a literal or an int16.
				doc := [][]byte{{4, 0}, {4, 1}, {4, 2}, {5, v(), v()}, {12, 1, v()}}[int(v())%5]
				body = append(body, byte(len(doc)), 0, 0, 0)[:len(body)+int(meta)]
				body = append(body, doc...)
				continue
			}
			for b := range int(meta) {
				body = append(body, byte(n>>(8*b)))
			}
			take(n)
		case mysql.MYSQL_TYPE_DATETIME2:
			if v()%2 == 0 {
				body = append(body, datetime2Bytes(int(v())*40, int(v()%13), int(v()%32), int(v()%24), int(v()%60), int(v()%60), int(v())*3921, int(meta))...)
				continue
			}
			take(5 + int(meta+1)/2)
		case mysql.MYSQL_TYPE_TIMESTAMP2:
			take(4 + int(meta+1)/2)
		default:
			if n, ok := planColumn(c.typ, meta).fixedWidth(); ok {
				take(n)
			} else if n, ok := valueLength(c.typ, meta, []byte{}); ok {
				take(n)
			}
		}
	}
	return append(nulls, body...)
}

// fixedWidth is the byte length of a value of c when it does not depend on
// the value.
func (c imageColumn) fixedWidth() (int, bool) {
	switch c.kind {
	case kindInt, kindFloat, kindDouble, kindYear, kindDatetime2, kindTimestamp2:
		return c.width, true
	case kindNull:
		return 0, true
	}
	return 0, false
}
