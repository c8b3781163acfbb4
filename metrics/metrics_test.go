package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBinlogCollector(t *testing.T) {
	c := BinlogCollector(func() BinlogStats {
		return BinlogStats{Events: 42, DeadLetters: 1, Batches: 7, Sessions: 2, StatementDML: 3, LastCommit: time.Unix(1700000000, 0), Leader: true}
	})
	want := `
# HELP binlog_outbox_events_appended_total Events appended to streams, dead letters included.
# TYPE binlog_outbox_events_appended_total counter
binlog_outbox_events_appended_total{mode="binlog"} 42
# HELP binlog_outbox_statement_inserts_total INSERTs into the outbox logged as statements: their events are lost to the relay. Alert on any.
# TYPE binlog_outbox_statement_inserts_total counter
binlog_outbox_statement_inserts_total{mode="binlog"} 3
# HELP binlog_outbox_last_commit_timestamp_seconds Commit time of the newest transaction appended, from the binlog (Unix time).
# TYPE binlog_outbox_last_commit_timestamp_seconds gauge
binlog_outbox_last_commit_timestamp_seconds{mode="binlog"} 1.7e+09
# HELP binlog_outbox_leader 1 while this relay reads (it holds the lease of the position, or runs with --lease=false), 0 while it stands by.
# TYPE binlog_outbox_leader gauge
binlog_outbox_leader{mode="binlog"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"binlog_outbox_events_appended_total", "binlog_outbox_statement_inserts_total", "binlog_outbox_last_commit_timestamp_seconds", "binlog_outbox_leader"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 8 {
		t.Errorf("binlog collector exposes %d metrics, want 8", n)
	}
}

func TestPollCollector(t *testing.T) {
	c := PollCollector(func() PollStats { return PollStats{Events: 5, Duplicates: 2} })
	if got := testutil.ToFloat64(prometheus.Collector(onlyMetric{c, "binlog_outbox_duplicates_skipped_total"})); got != 2 {
		t.Errorf("duplicates_skipped_total = %v, want 2", got)
	}
}

// onlyMetric narrows a collector to one metric for testutil.ToFloat64.
type onlyMetric struct {
	prometheus.Collector
	name string
}

func (o onlyMetric) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 32)
	o.Collector.Collect(all)
	close(all)
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+o.name+`"`) {
			ch <- m
		}
	}
}

func TestGroups_Collect(t *testing.T) {
	g := NewGroups("binlog", func(context.Context) ([]Group, error) {
		return []Group{
			{Stream: "outbox:order", Group: "billing", Pending: 2, Lag: 3, Consumers: 2, IdleConsumers: 1, OldestPendingAge: 90 * time.Second, OldestPendingDeliveries: 7,
				HoldsBackTrim: true, TrimHeldAge: 90 * time.Second},
			{Stream: "outbox:order", Group: "audit", Lag: 1, Consumers: 1},
		}, nil
	}, time.Second, nil)
	if n := testutil.CollectAndCount(g); n != 0 {
		t.Errorf("before the first pass: %d metrics, want none", n)
	}
	if err := g.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP binlog_outbox_group_holds_back_trim 1 when --trim acked stops at this group: it has not acknowledged, or not been delivered, the oldest entries trimming would remove.
# TYPE binlog_outbox_group_holds_back_trim gauge
binlog_outbox_group_holds_back_trim{group="audit",mode="binlog",stream="outbox:order"} 0
binlog_outbox_group_holds_back_trim{group="billing",mode="binlog",stream="outbox:order"} 1
# HELP binlog_outbox_group_idle_consumers Consumers of the group that have not read for longer than --group-idle-threshold.
# TYPE binlog_outbox_group_idle_consumers gauge
binlog_outbox_group_idle_consumers{group="audit",mode="binlog",stream="outbox:order"} 0
binlog_outbox_group_idle_consumers{group="billing",mode="binlog",stream="outbox:order"} 1
# HELP binlog_outbox_group_lag Entries of the stream not yet delivered to the consumer group, counted from the stream's ids.
# TYPE binlog_outbox_group_lag gauge
binlog_outbox_group_lag{group="audit",mode="binlog",stream="outbox:order"} 1
binlog_outbox_group_lag{group="billing",mode="binlog",stream="outbox:order"} 3
# HELP binlog_outbox_group_oldest_pending_age_seconds Age (from its id) of the group's pending entry of the lowest id; 0 when none is pending.
# TYPE binlog_outbox_group_oldest_pending_age_seconds gauge
binlog_outbox_group_oldest_pending_age_seconds{group="audit",mode="binlog",stream="outbox:order"} 0
binlog_outbox_group_oldest_pending_age_seconds{group="billing",mode="binlog",stream="outbox:order"} 90
# HELP binlog_outbox_group_oldest_pending_deliveries Times the group's pending entry of the lowest id was delivered, claims included; 0 when none is pending.
# TYPE binlog_outbox_group_oldest_pending_deliveries gauge
binlog_outbox_group_oldest_pending_deliveries{group="audit",mode="binlog",stream="outbox:order"} 0
binlog_outbox_group_oldest_pending_deliveries{group="billing",mode="binlog",stream="outbox:order"} 7
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want), "binlog_outbox_group_holds_back_trim", "binlog_outbox_group_idle_consumers", "binlog_outbox_group_lag",
		"binlog_outbox_group_oldest_pending_age_seconds", "binlog_outbox_group_oldest_pending_deliveries"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(g); n != 16 {
		t.Errorf("%d series, want 8 per group", n)
	}
}
