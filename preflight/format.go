package preflight

import (
	"fmt"

	"github.com/binlog-outbox/binlog-outbox/entry"
)

// NameFormat is the requirement on the entry format (--format and its
// mapping).
const NameFormat = "entry format"

// checkFormat reports the entry format and its mapping, so that an operator
// sees which class each event type becomes before the workers do. A stream
// template with placeholders names many streams, while one Messenger Redis
// transport reads one: the events of the others reach no worker unless a
// transport is configured per stream.
func checkFormat(f *entry.Format, stream string, partitions int) Result {
	if f.Name == entry.FormatMessenger && stream != "" {
		t, err := entry.ParseTemplate(stream, max(partitions, 1), true)
		if err == nil && !t.Fixed() {
			return warn(NameFormat, fmt.Sprintf("%s; --stream %s names many streams, and a Messenger Redis transport reads one", f, stream),
				"set a fixed --stream (e.g. --stream messages) and the same stream in the transport's DSN, or configure one transport per stream the template names", both)
		}
	}
	return pass(NameFormat, f.String(), both)
}
