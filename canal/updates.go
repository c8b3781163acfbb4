package canal

import (
	"log/slog"
	"time"

	"github.com/binlog-outbox/binlog-outbox/schema"
)

// updateWarnEvery is how often an UPDATE of a followed table is reported at
// most: the first at once, the next after a minute, with the count since.
const updateWarnEvery = time.Minute

// updateWarner reports the UPDATEs of followed tables that
// Config.UpdateWarning names, rate-limited: a worker that reserves every row
// would otherwise write a line per job. It outlives sessions; the reader's
// goroutine alone calls saw.
type updateWarner struct {
	text  string
	last  time.Time
	since uint64
}

// saw records an UPDATE rows event of table at file:pos.
func (w *updateWarner) saw(log *slog.Logger, table schema.Name, file string, pos uint32) {
	w.since++
	now := time.Now()
	if !w.last.IsZero() && now.Sub(w.last) < updateWarnEvery {
		return
	}
	log.Error(w.text, "table", table.String(), "binlog", file, "end_log_pos", pos, "updates_since_last_report", w.since)
	w.last, w.since = now, 0
}
