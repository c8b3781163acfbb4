// Package binlogrow turns the rows events of the binlog into outbox events.
// On go-mysql's parsing goroutine (DecodeConfig) it decodes the row images
// of the followed tables' INSERTs into column values, in place of go-mysql's
// DecodeData (rowimage.go), and completes their table maps' optional
// metadata, for those tables only (tablemeta.go). On the reader's goroutine
// a Decoder maps a table map's columns to the outbox's logical columns, by
// the names it carries or by a proven positional layout, and the Layout it
// finds turns each row into an outbox.Event, its text converted to UTF-8
// from the character set of the column's collation (ReadCollations).
//
// It holds no connection (ReadCollations asks the server through the
// caller's) and no position: which tables are followed, which layout is
// proven and where a transaction starts are the reader's (package canal).
package binlogrow

import (
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-outbox/binlog-outbox/position"
)

// DecodeConfig is the part of the syncer's configuration that decides what
// the events look like: how rows, times, decimals and JSON are decoded, and
// which rows are decoded at all: those of the tables match accepts. match
// runs on go-mysql's parsing goroutine, once per rows event, so it should
// remember its answer per table. The tests that replay binlog files recorded
// by real MySQL servers build their parser from it, so what they check is
// what the live reader decodes.
func DecodeConfig(flavor string, match func(*replication.TableMapEvent) bool) replication.BinlogSyncerConfig {
	return DecodeConfigWalking(flavor, match, nil)
}

// DecodeConfigWalking is DecodeConfig whose decode function asks walk,
// before it decodes the rows of an INSERT of a followed table, whether the
// reader keeps them (nil: it always does). When walk returns true the rows
// are walked instead: each image must parse as decoding requires, and the
// event gets each row's skipped columns but no values (Walked). A reader
// that reads a transaction too large to keep only to find its end needs no
// values of it: decoding them was almost half of that first read's CPU
// (perf of binlog-outbox-bench --workloads onetx), and a walk costs a third
// of a decoding (BenchmarkImageDecoder_OutboxRow). Like match, walk runs on
// go-mysql's parsing goroutine.
func DecodeConfigWalking(flavor string, match func(*replication.TableMapEvent) bool, walk func() bool) replication.BinlogSyncerConfig {
	cfg := replication.BinlogSyncerConfig{
		Flavor:                  flavor,
		TimestampStringLocation: time.UTC,
		RenderJSONAsMySQLText:   true,
		UseDecimal:              false,
		// MariaDB 11.4+ writes LogPos 0 inside transactions.
		FillZeroLogPos:            flavor == position.FlavorMariaDB,
		PayloadDecoderConcurrency: 1,
	}
	// The parser calls the function on one goroutine (compressed
	// transactions too: PayloadDecoderConcurrency is 1), so the decoders
	// are its own.
	var images imageDecoder
	// Table maps' optional metadata is decoded for the followed tables
	// only, when their rows are (tablemeta.go).
	var metas tableMetas
	cfg.TableMapOptionalMetaDecodeFunc = metas.stash
	// imageDecoder renders values as go-mysql does with these settings
	// only; with others every row is go-mysql's to decode.
	ownDecoder := cfg.TimestampStringLocation == time.UTC && !cfg.ParseTime && !cfg.UseDecimal
	cfg.RowsEventDecodeFunc = func(ev *replication.RowsEvent, data []byte) error {
		pos, err := ev.DecodeHeader(data)
		if err != nil {
			return err
		}
		if ev.Flags&replication.RowsEventStmtEndFlag != 0 {
			// go-mysql forgets the statement's table maps after this event.
			defer metas.statementEnd()
		}
		// Rows of other tables are never decoded: on a busy server they are
		// most of the binlog.
		if ev.Table == nil || !match(ev.Table) {
			return nil
		}
		if err := metas.complete(ev.Table); err != nil {
			return err
		}
		// The relay reads the INSERTs of its tables; their UPDATEs and
		// DELETEs (a clean-up of relayed rows) only need the header, as
		// the rows of other tables do. Rows events of a type go-mysql
		// cannot name are decoded, for the reader's guard to stop at.
		if t := ev.Type(); t == replication.EnumRowsEventTypeUpdate || t == replication.EnumRowsEventTypeDelete {
			return nil
		}
		if walk != nil && walk() && images.walk(ev, pos, data) {
			return nil
		}
		if ownDecoder && images.decode(ev, pos, data) {
			return nil
		}
		return ev.DecodeData(pos, data)
	}
	return cfg
}
