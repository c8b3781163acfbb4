package preflight

import (
	"strings"
	"testing"

	"github.com/binlog-outbox/binlog-outbox/entry"
)

func TestCheckFormat(t *testing.T) {
	messenger := &entry.Format{Name: entry.FormatMessenger, Classes: map[string]string{"order.placed": `App\Message\OrderPlaced`}}
	if err := messenger.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		format     *entry.Format
		stream     string
		partitions int
		want       Status
		wantText   string
	}{
		{"flat", &entry.Format{}, entry.DefaultStream, 1, Pass, "flat: one field per column"},
		{"messenger, fixed stream", messenger, "messages", 1, Pass, `order.placed → App\Message\OrderPlaced`},
		{"messenger, one partition", messenger, "messages:{partition}", 1, Pass, "symfony-messenger"},
		{"messenger, per aggregate type", messenger, entry.DefaultStream, 1, Warn, "names many streams"},
		{"messenger, partitions", messenger, "messages:{partition}", 4, Warn, "names many streams"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkFormat(tt.format, tt.stream, tt.partitions)
			if r.Status != tt.want || !strings.Contains(r.Detail, tt.wantText) || r.Name != NameFormat {
				t.Errorf("checkFormat = %s %q %q, want %s with %q", r.Status, r.Name, r.Detail, tt.want, tt.wantText)
			}
			if r.Status == Warn && r.Fix == "" {
				t.Error("a warning without a fix")
			}
		})
	}
}
