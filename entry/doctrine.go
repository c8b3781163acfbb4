package entry

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// DelayedSetSuffix makes the key of the Redis transport's sorted set of
// delayed messages from its stream's (Connection::$queue,
// "<stream>__queue"), where Messenger's consumer moves a message to the
// stream once its score, the due time in milliseconds, has passed.
const DelayedSetSuffix = "__queue"

// prepareDoctrine encodes the Redis transport's envelope {"body": ...,
// "headers": {...}} of a messenger_messages row, or marks e Invalid. The
// message id becomes "<table>:<id>", stable across restarts and both modes,
// and the event type the message's class (the headers' type), which the
// entry fields and the stream template then show.
//
// A message still delayed when the relay reads it (available_at, which the
// preset maps to occurred_at, in the future: Doctrine's send of a
// DelayStamp) gets instead the member of the Redis transport's delayed set,
// as Connection::add() writes one: {"body", "headers", "uniqid"}, whose
// uniqid keeps members of equal messages apart and is here the message id,
// so that a row's member is always the same. The append puts it in
// <stream>__queue with available_at as its score (doctrineDue), and
// Messenger's consumer (Connection::get()) moves it to the stream when due
// by its own clock. The relay's clock only tells whether the row still
// waits: a row read once due (a catch-up) goes to the stream, as the
// consumer would move it there at once. The decision is taken here, once,
// and kept in the envelope: a batch built again must put each event where
// its first build did.
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
	delayed := e.OccurredAt.After(time.Now())
	b := make([]byte, 0, len(e.Payload)+len(e.Payload)/8+len(e.Headers)+len(e.MessageID)+48)
	b = append(b, `{"body":`...)
	b = appendJSONString(b, e.Payload)
	b = append(b, `,"headers":`...)
	if delayed {
		b = appendMarkedHeaders(b, e)
	} else {
		b = append(b, strings.TrimSpace(string(e.Headers))...)
	}
	if delayed {
		b = append(b, `,"uniqid":`...)
		b = appendJSONString(b, []byte(e.MessageID))
	}
	e.Envelope = append(b, '}')
}

// The headers a delayed message's envelope gets besides its own, naming its
// row. Messenger's consumer moves the member from the delayed set to the
// stream as {body, headers}, dropping the relay's fields (outbox_id,
// message_id): without these headers verify could not tell the moved entry's
// row, would call it missing, and repair would append it a second time.
// Messenger's serializers decode the type and the stamp headers
// (X-Message-Stamp-*) only and pass the rest by.
const (
	HeaderOutboxID  = "X-Binlog-Outbox-Id"
	HeaderMessageID = "X-Binlog-Outbox-Message-Id"
)

// appendMarkedHeaders appends e's headers object with HeaderOutboxID and
// HeaderMessageID first (prepareDoctrine checked that it is an object, or
// PHP's [] for none).
func appendMarkedHeaders(b []byte, e *outbox.Event) []byte {
	b = append(b, `{"`+HeaderOutboxID+`":"`...)
	b = strconv.AppendUint(b, e.OutboxID, 10)
	b = append(b, `","`+HeaderMessageID+`":`...)
	b = appendJSONString(b, []byte(e.MessageID))
	h := strings.TrimSpace(string(e.Headers))
	if h == "[]" || strings.TrimSpace(strings.TrimPrefix(h, "{")) == "}" {
		return append(b, '}')
	}
	b = append(b, ',')
	return append(b, h[1:]...)
}

// DoctrineRow returns the row a Redis transport message names by the
// headers of a delayed message (HeaderOutboxID, HeaderMessageID): message is
// an entry's message field, or a delayed set's member. ok is false for a
// message without them; an error says that message names a row in a way
// DoctrineRow cannot read (another serializer than PHP's), which a caller
// must not take for no row at all.
func DoctrineRow(message string) (outboxID uint64, messageID string, ok bool, err error) {
	if !strings.Contains(message, HeaderOutboxID) {
		return 0, "", false, nil
	}
	var m struct {
		Headers map[string]any `json:"headers"`
	}
	if json.Unmarshal([]byte(unserializePHPString(message)), &m) != nil {
		return 0, "", false, fmt.Errorf("a message carries %s but is not the JSON of the Redis transport, nor that JSON as PHP serialize() writes a string (Messenger's default serializer option): a serializer binlog-outbox cannot read (igbinary?)", HeaderOutboxID)
	}
	id, _ := m.Headers[HeaderOutboxID].(string)
	messageID, _ = m.Headers[HeaderMessageID].(string)
	outboxID, perr := strconv.ParseUint(id, 10, 64)
	if perr != nil || messageID == "" {
		return 0, "", false, fmt.Errorf("a message's headers %s %q and %s %q do not name a row", HeaderOutboxID, id, HeaderMessageID, messageID)
	}
	return outboxID, messageID, true, nil
}

// unserializePHPString returns the string PHP's serialize() wrote as
// s:<length>:"<string>"; (phpredis with Redis::SERIALIZER_PHP, which
// Messenger's Redis connection sets unless told otherwise, so that the
// entries it moves from a delayed set to the stream hold their message that
// way), or v unchanged when it is not one.
func unserializePHPString(v string) string {
	n, rest, ok := strings.Cut(strings.TrimPrefix(v, "s:"), `:"`)
	if !ok || !strings.HasPrefix(v, "s:") || !strings.HasSuffix(rest, `";`) {
		return v
	}
	body := rest[:len(rest)-2]
	if strconv.Itoa(len(body)) != n {
		return v
	}
	return body
}

// doctrineDue reports whether e, a prepared messenger_messages row, goes
// to its stream's delayed set (prepareDoctrine) and when it is due:
// available_at in Unix milliseconds, the score Connection::add() gives a
// delayed message.
func doctrineDue(e *outbox.Event) (due int64, delayed bool) {
	// The member ends with the uniqid, the message id: ,"uniqid":"<id>"}.
	n := len(e.Envelope) - len(e.MessageID) - len(`,"uniqid":""}`)
	if n < 0 || !bytes.HasPrefix(e.Envelope[n:], []byte(`,"uniqid":"`)) ||
		!bytes.HasSuffix(e.Envelope, []byte(`"}`)) || string(e.Envelope[n+len(`,"uniqid":"`):len(e.Envelope)-2]) != e.MessageID {
		return 0, false
	}
	return e.OccurredAt.UnixMilli(), true
}
