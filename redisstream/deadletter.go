package redisstream

import (
	"fmt"
	"github.com/binlog-outbox/binlog-outbox/entry"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// checkDeadLetterStream refuses a template that renders the dead-letter
// stream's name whatever the events hold: one without placeholders, or with
// {partition} only, whose every value is known at start. Events there would
// mix with the dead letters. Placeholders filled from the rows cannot be
// decided at start; Sink.Prepare dead-letters such an event instead.
func checkDeadLetterStream(t *entry.Template, deadLetter string) error {
	if !t.AlwaysNames(deadLetter) {
		return nil
	}
	return outbox.WithHint(fmt.Errorf("%w: --stream %q names the dead-letter stream %s (--dead-letter-stream), and events would mix with the dead letters", outbox.ErrConfig, t, deadLetter),
		"give the events and the dead letters different streams: change --stream, or set --dead-letter-stream to a stream no event goes to, e.g. --dead-letter-stream %s:dead-letter", t)
}

// deadLetterCollision is the reason of a dead letter whose event's stream
// is the dead-letter stream.
func deadLetterCollision(t *entry.Template, deadLetter string) string {
	return fmt.Sprintf("its stream under --stream %s is the dead-letter stream %s; set --dead-letter-stream to a stream no event goes to, then republish it", t, deadLetter)
}
