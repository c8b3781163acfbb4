package entry

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Formats of Laravel's database queue table (jobs), whose rows hold a job's
// payload as Illuminate\Queue\DatabaseQueue wrote it.
const (
	// FormatLaravelQueue writes each job where Illuminate\Queue\RedisQueue
	// pushes one, so that `queue:work redis` and Horizon run it: the payload
	// with the id and attempts RedisQueue adds, RPUSHed to the queue's list
	// (the stream template renders it: <prefix>queues:<queue>) with a 1 on
	// its notify list, or, for a job still delayed, ZADDed to its delayed
	// set scored by available_at.
	FormatLaravelQueue = "laravel-queue"
	// FormatLaravelStream writes each job as a stream entry for the outbox
	// queue connector of integrations/laravel: the flat fields with the
	// payload in the job field; a job still delayed goes to the stream's
	// delayed set (LaravelDelayedSuffix), from which the connector moves it
	// to the stream once due.
	FormatLaravelStream = "laravel-stream"
)

// Key suffixes of Laravel's Redis queue (RedisQueue::getQueue and
// LuaScripts): the list workers BLPOP to wake, and the sorted set of
// delayed jobs scored by their Unix time.
const (
	LaravelNotifySuffix  = ":notify"
	LaravelDelayedSuffix = ":delayed"
)

// FieldJob holds the job's payload in FormatLaravelStream: the JSON that
// Laravel's worker runs (job, data, maxTries, ...).
const FieldJob = "job"

// A prepared job's envelope starts with one byte that records where it
// goes, so that a batch built again puts it where its first build did: the
// queue (list or stream) or the delayed set. The byte is not written.
const (
	laravelNow     = 'q'
	laravelDelayed = 'd'
)

// isLaravel reports whether the format is one of Laravel's.
func isLaravel(name string) bool {
	return name == FormatLaravelQueue || name == FormatLaravelStream
}

// prepareLaravel encodes a jobs row for its format, or marks e Invalid with
// the reason Laravel's worker could not run it. The message id becomes
// "<table>:<id>"; the event type the job's displayName.
//
// Whether the job is still delayed (available_at, which the preset maps to
// occurred_at, in the future) is decided here once, by the relay's clock:
// a delayed job goes to the delayed set scored by available_at, where the
// worker's own clock decides when it runs, so it never runs early; a job
// read once due (a catch-up) goes to the queue, as the worker would move it
// there at once.
func prepareLaravel(e *outbox.Event, format string) {
	if e.Invalid != "" || e.Envelope != nil {
		return
	}
	e.MessageID = e.Table + ":" + strconv.FormatUint(e.OutboxID, 10)
	payload := bytes.TrimSpace(e.Payload)
	if !utf8.Valid(payload) {
		e.Invalid = "payload is not valid UTF-8, which Laravel's worker cannot json_decode"
		return
	}
	var job map[string]json.RawMessage
	if err := json.Unmarshal(payload, &job); err != nil || job == nil {
		e.Invalid = "payload is not a JSON object, which Laravel's DatabaseQueue writes and its worker decodes"
		return
	}
	var handler string
	if json.Unmarshal(job["job"], &handler) != nil || handler == "" {
		e.Invalid = `payload has no "job" (the handler Laravel's worker calls): not a job Laravel's queue wrote`
		return
	}
	var name string
	if json.Unmarshal(job["displayName"], &name) == nil && name != "" {
		e.EventType = name
	}
	kind := byte(laravelNow)
	if e.OccurredAt.After(time.Now()) {
		kind = laravelDelayed
	}
	if format == FormatLaravelStream {
		if kind == laravelDelayed {
			e.Envelope = laravelMember(e, payload)
			return
		}
		e.Envelope = append([]byte{kind}, payload...)
		return
	}
	// RedisQueue::createPayloadArray adds id and attempts after the fields
	// the base Queue writes; its pop script increments attempts, and the
	// worker reads the id as the job's (Horizon's key for it). DatabaseQueue
	// writes neither: a row that has them was written otherwise, and which
	// of two values Laravel would read is not for the relay to guess.
	if _, ok := job["id"]; ok {
		e.Invalid = `payload already has an "id", which Laravel's Redis queue adds itself: not a job DatabaseQueue wrote`
		return
	}
	if _, ok := job["attempts"]; ok {
		e.Invalid = `payload already has "attempts", which Laravel's Redis queue adds itself: not a job DatabaseQueue wrote`
		return
	}
	// The uuid every Laravel since 6 writes is unique per dispatch and the
	// same each time the row is read; RedisQueue draws 32 random
	// characters instead, which nothing reads but as a name.
	id := e.MessageID
	var uuid string
	if json.Unmarshal(job["uuid"], &uuid) == nil && uuid != "" {
		id = uuid
	}
	b := make([]byte, 0, len(payload)+len(id)+32)
	b = append(b, kind)
	b = append(b, payload[:len(payload)-1]...) // up to the closing brace
	if len(job) > 0 {
		b = append(b, ',')
	}
	b = append(b, `"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"attempts":0}`...)
	e.Envelope = b
}

// laravelMember is the member of a delayed job in FormatLaravelStream's
// delayed set: the entry's fields as a JSON object (kind byte first), in
// the order of a flat entry, which the connector XADDs to the stream once
// the job is due. The outbox id keeps members of equal jobs apart.
func laravelMember(e *outbox.Event, payload []byte) []byte {
	b := make([]byte, 0, len(payload)+len(payload)/8+256)
	b = append(b, laravelDelayed, '{')
	b = appendJSONPair(b, FieldMessageID, e.MessageID, false)
	b = appendJSONPair(b, FieldAggregateType, e.AggregateType, true)
	b = appendJSONPair(b, FieldAggregateID, e.AggregateID, true)
	b = appendJSONPair(b, FieldEventType, e.EventType, true)
	b = append(b, ',')
	b = appendJSONString(b, FieldJob)
	b = append(b, ':')
	b = appendJSONString(b, payload)
	b = appendJSONPair(b, FieldOccurredAt, e.OccurredAt.UTC().Format(OccurredAtLayout), true)
	b = appendJSONPair(b, FieldOutboxID, strconv.FormatUint(e.OutboxID, 10), true)
	return append(b, '}')
}

// laravelDue reports whether e, a prepared jobs row, goes to its delayed
// set and when it is due: available_at in Unix seconds, the score
// RedisQueue::laterRaw gives a delayed job.
func laravelDue(e *outbox.Event) (due int64, delayed bool) {
	if len(e.Envelope) == 0 || e.Envelope[0] != laravelDelayed {
		return 0, false
	}
	return e.OccurredAt.Unix(), true
}

// JobBody is what is written of a prepared Laravel job (FormatLaravelQueue,
// FormatLaravelStream): its envelope without the byte that records where it
// goes (Format.Delayed, Format.ToList).
func JobBody(e *outbox.Event) []byte {
	if len(e.Envelope) == 0 {
		return nil
	}
	return e.Envelope[1:]
}
