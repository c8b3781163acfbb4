package redisstream

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// FormatDoctrine relays Symfony Messenger's Doctrine transport table
// (messenger_messages) to Messenger's Redis transport: each row's body and
// headers, which Messenger's serializer wrote already, become the message
// field the Redis transport's receiver decodes. No class mapping is needed:
// the headers carry the message's type.
const FormatDoctrine = "symfony-doctrine"

// prepareDoctrine encodes the Redis transport's envelope {"body": ...,
// "headers": {...}} of a messenger_messages row, or marks e Invalid. The
// message id becomes "<table>:<id>", stable across restarts and both modes,
// and the event type the message's class (the headers' type), which the
// entry fields and the stream template then show.
//
// A message still delayed when the relay reads it (available_at, which the
// preset maps to occurred_at, in the future: Doctrine's send of a DelayStamp)
// goes to the dead-letter stream with the reason: appended to the stream it
// would be handled at once, before its time, and the Redis transport's
// delayed set (<stream>__queue) is not written in the append's atomic step.
// A delayed row read once it is due (a catch-up) is relayed as any other.
// The relay's clock against the application's: a skew between them moves
// the line by as much.
func prepareDoctrine(e *outbox.Event) {
	if e.Invalid != "" || e.Envelope != nil {
		return
	}
	e.MessageID = e.Table + ":" + strconv.FormatUint(e.OutboxID, 10)
	if !utf8.Valid(e.Payload) {
		e.Invalid = "body is not valid UTF-8, which the JSON of the Redis transport's message needs"
		return
	}
	// PHP's json_encode writes no headers (PhpSerializer's) as [], which the
	// Redis transport writes and decodes alike.
	var headers map[string]any
	if h := strings.TrimSpace(string(e.Headers)); h != "[]" {
		if err := json.Unmarshal(e.Headers, &headers); err != nil || headers == nil {
			e.Invalid = "headers is not a JSON object, which Messenger's Doctrine transport writes and its Redis transport needs"
			return
		}
	}
	if t, ok := headers[messengerHeaderType].(string); ok && t != "" {
		e.EventType = t
	}
	if e.OccurredAt.After(time.Now()) {
		e.Invalid = "message is delayed until " + e.OccurredAt.UTC().Format(OccurredAtLayout) + " (available_at, a DelayStamp): relayed now it would be handled before its time, and the relay does not write the Redis transport's delayed set; send delayed messages to the Redis transport directly"
		return
	}
	b := make([]byte, 0, len(e.Payload)+len(e.Payload)/8+len(e.Headers)+32)
	b = append(b, `{"body":`...)
	b = appendJSONString(b, e.Payload)
	b = append(b, `,"headers":`...)
	b = append(b, strings.TrimSpace(string(e.Headers))...)
	e.Envelope = append(b, '}')
}
