package entry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// Entry formats (Format.Name, --format).
const (
	// FormatFlat writes one field per column (FieldMessageID, FieldPayload,
	// ...): what the examples' consumers read.
	FormatFlat = "flat"
	// FormatMessenger writes, besides the flat fields other than the
	// payload, a FieldMessage that Symfony Messenger's Redis transport
	// reads: Messenger's workers handle the events as typed messages.
	FormatMessenger = "symfony-messenger"
)

// FieldMessage holds Messenger's envelope in FormatMessenger: the JSON object
// {"body": <payload>, "headers": {...}} that the Redis transport's
// Connection::add writes and RedisReceiver::get decodes. The transport writes
// it PHP-serialized (phpredis' default serializer); phpredis hands a value
// that is not PHP-serialized back as it is, so plain JSON reads the same with
// every serializer setting and stays readable to other consumers.
const FieldMessage = "message"

// UnmappedDeadLetter is Format.Unmapped's default: a row whose event type has
// no class goes to the dead-letter stream with the reason.
const UnmappedDeadLetter = "dead-letter"

// unmappedClassPrefix starts an Unmapped value that names a fallback class.
const unmappedClassPrefix = "class:"

// Messenger header names. "type" and "Content-Type" are the ones Messenger's
// Serializer writes and reads; the others carry the outbox fields, which its
// decode leaves out of the Envelope (only X-Message-Stamp-* headers become
// stamps): Format.Stamp brings them to the handlers.
const (
	messengerHeaderType        = "type"
	messengerHeaderContentType = "Content-Type"
	messengerContentType       = "application/json"
	messengerStampPrefix       = "X-Message-Stamp-"
)

// Format says how an event becomes a stream entry. The zero value is
// FormatFlat. Dead letters are always flat, payload and reason included:
// their readers are operators, and nothing may vanish.
type Format struct {
	// Name is FormatFlat (default) or FormatMessenger.
	Name string `json:"name"`
	// Classes maps an event type to the class of its Messenger message
	// (FormatMessenger), without a leading backslash, e.g. "order.placed" →
	// `App\Message\OrderPlaced`. Messenger's Serializer deserializes the
	// payload into it.
	Classes map[string]string `json:"classes,omitempty"`
	// Unmapped says what happens to an event type Classes does not name:
	// UnmappedDeadLetter (default) or "class:<Class>", a class for all of
	// them. Without a class the event cannot be a message; as a dead letter
	// it neither blocks the stream nor vanishes.
	Unmapped string `json:"unmapped,omitempty"`
	// Stamp, when set, is the class of a stamp (Messenger's StampInterface)
	// that the entry's X-Message-Stamp-<Stamp> header carries the outbox
	// fields in: Messenger's decode turns it into a stamp on the Envelope,
	// which middleware and handlers read, and which retries and the failure
	// transport keep. The plain headers are gone after decode.
	Stamp string `json:"stamp,omitempty"`
}

// phpClass matches a fully qualified PHP class name without the leading
// backslash.
var phpClass = regexp.MustCompile(`^[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*(\\[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*)*$`)

// checkClass returns the class name without a leading backslash, or an error
// naming what gave it.
func checkClass(class, what string) (string, error) {
	c := strings.TrimPrefix(strings.TrimSpace(class), `\`)
	if !phpClass.MatchString(c) {
		return "", outbox.WithHint(fmt.Errorf("%w: %s %q is not a PHP class name", outbox.ErrConfig, what, class),
			`give the fully qualified class, e.g. App\Message\OrderPlaced (in a shell, quote it: 'App\Message\OrderPlaced')`)
	}
	return c, nil
}

// ParseClasses reads event_type=Class pairs (--messenger-class) into a map.
// An event type given twice with different classes is an error: one of the
// two would be silently wrong.
func ParseClasses(specs []string, into map[string]string, source string) error {
	for _, spec := range specs {
		typ, class, ok := strings.Cut(spec, "=")
		typ = strings.TrimSpace(typ)
		if !ok || typ == "" {
			return outbox.WithHint(fmt.Errorf("%w: %s %q is not event_type=Class", outbox.ErrConfig, source, spec),
				`write it as event_type=Class, e.g. order.placed=App\Message\OrderPlaced`)
		}
		c, err := checkClass(class, source+" "+typ)
		if err != nil {
			return err
		}
		if prev, dup := into[typ]; dup && prev != c {
			return outbox.WithHint(fmt.Errorf("%w: event type %q is mapped to %s and to %s", outbox.ErrConfig, typ, prev, c),
				"map each event type to one class")
		}
		into[typ] = c
	}
	return nil
}

// ReadClassesFile reads a file of event_type=Class lines (--messenger-class-file)
// into a map; empty lines and lines starting with # are skipped.
func ReadClassesFile(path string, into map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return outbox.WithHint(fmt.Errorf("%w: --messenger-class-file: %v", outbox.ErrConfig, err),
			"point it at a readable file of event_type=Class lines")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := ParseClasses([]string{line}, into, fmt.Sprintf("%s line %d:", path, n)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: --messenger-class-file %s: %v", outbox.ErrConfig, path, err)
	}
	return nil
}

// Validate normalises f (the default name, the classes without a leading
// backslash) and reports the first invalid setting by its flag. It is
// idempotent; redisstream.New calls it.
func (f *Format) Validate() error {
	if f.Name == "" {
		f.Name = FormatFlat
	}
	switch f.Name {
	case FormatFlat:
		if len(f.Classes) > 0 || f.Stamp != "" || (f.Unmapped != "" && f.Unmapped != UnmappedDeadLetter) {
			return outbox.WithHint(fmt.Errorf("%w: --messenger-* options are set but --format is %s", outbox.ErrConfig, f.Name),
				"add --format %s, or drop the --messenger-* options", FormatMessenger)
		}
		return nil
	case FormatMessenger:
	case FormatDoctrine, FormatLaravelQueue, FormatLaravelStream:
		if len(f.Classes) > 0 || f.Stamp != "" || (f.Unmapped != "" && f.Unmapped != UnmappedDeadLetter) {
			if f.Name != FormatDoctrine {
				return outbox.WithHint(fmt.Errorf("%w: --messenger-* options are set with --format %s", outbox.ErrConfig, f.Name),
					"drop them: a job's payload names its class already")
			}
			return outbox.WithHint(fmt.Errorf("%w: --messenger-* options are set with --source %s", outbox.ErrConfig, f.Name),
				"drop them: the rows' headers name each message's class already")
		}
		return nil
	default:
		return outbox.WithHint(fmt.Errorf("%w: --format %q is not an entry format", outbox.ErrConfig, f.Name),
			"use --format %s (one field per column) or --format %s; with --source laravel-jobs, --format %s or %s", FormatFlat, FormatMessenger, FormatLaravelQueue, FormatLaravelStream)
	}
	if f.Unmapped == "" {
		f.Unmapped = UnmappedDeadLetter
	}
	if f.Unmapped != UnmappedDeadLetter {
		class, ok := strings.CutPrefix(f.Unmapped, unmappedClassPrefix)
		if !ok {
			return outbox.WithHint(fmt.Errorf("%w: --messenger-unmapped %q is neither %s nor class:<Class>", outbox.ErrConfig, f.Unmapped, UnmappedDeadLetter),
				`use --messenger-unmapped %s, or class:App\Message\OutboxEvent to deliver every unmapped event type as that class`, UnmappedDeadLetter)
		}
		c, err := checkClass(class, "--messenger-unmapped")
		if err != nil {
			return err
		}
		f.Unmapped = unmappedClassPrefix + c
	}
	if len(f.Classes) == 0 && f.Unmapped == UnmappedDeadLetter {
		return outbox.WithHint(fmt.Errorf("%w: --format %s maps no event type to a message class", outbox.ErrConfig, FormatMessenger),
			`map each event type with --messenger-class event_type=Class (e.g. order.placed=App\Message\OrderPlaced) or --messenger-class-file; every event would be a dead letter`)
	}
	if f.Stamp != "" {
		c, err := checkClass(f.Stamp, "--messenger-stamp")
		if err != nil {
			return err
		}
		f.Stamp = c
	}
	return nil
}

// fallback returns the class of unmapped event types, or "".
func (f *Format) fallback() string {
	c, _ := strings.CutPrefix(f.Unmapped, unmappedClassPrefix)
	if c == f.Unmapped {
		return ""
	}
	return c
}

// String describes the format as `check` reports it and the start log shows
// it: the mapping sorted by event type, what becomes of the rest.
func (f *Format) String() string {
	if f.Name == FormatDoctrine {
		return FormatDoctrine + ": messenger_messages rows as the Redis transport's messages (body and headers as Doctrine's serializer wrote them); delayed ones (DelayStamp) to <stream>" + DelayedSetSuffix + " until available_at"
	}
	if f.Name == FormatLaravelQueue {
		return FormatLaravelQueue + ": jobs rows as Laravel's Redis queue pushes them (RPUSH <stream> and <stream>" + LaravelNotifySuffix + ", payload with id and attempts); delayed ones to <stream>" + LaravelDelayedSuffix + " until available_at"
	}
	if f.Name == FormatLaravelStream {
		return FormatLaravelStream + ": jobs rows as entries of the outbox queue connector (payload in the " + FieldJob + " field); delayed ones to <stream>" + LaravelDelayedSuffix + " until available_at"
	}
	if f.Name != FormatMessenger {
		return FormatFlat + ": one field per column"
	}
	types := make([]string, 0, len(f.Classes))
	for t := range f.Classes {
		types = append(types, t)
	}
	slices.Sort(types)
	var b strings.Builder
	b.WriteString(FormatMessenger + ": ")
	for i, t := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t + " → " + f.Classes[t])
	}
	if len(types) > 0 {
		b.WriteString("; ")
	}
	if c := f.fallback(); c != "" {
		b.WriteString("other event types → " + c)
	} else {
		b.WriteString("other event types → dead-letter stream")
	}
	if f.Stamp != "" {
		b.WriteString("; outbox fields in stamp " + f.Stamp)
	} else {
		b.WriteString("; no stamp (handlers cannot see message_id)")
	}
	return b.String()
}

// Prepare finishes e for the format: in FormatMessenger it encodes the
// envelope into e.Envelope, or marks e Invalid with the reason Messenger
// could not take it. A message Messenger fails to decode is worse than a
// dead letter: its worker rejects it (deleting it, with the transport's
// default delete_after_reject) and stops, and JSON it cannot read at all
// stays pending for ever. FormatDoctrine and the Laravel formats encode
// their rows likewise (doctrine.go, laravel.go). withAggregateType is false
// for a table without an aggregate_type column, whose envelope leaves it
// out. It is idempotent, and does nothing to an event that is already
// invalid.
func (f *Format) Prepare(e *outbox.Event, withAggregateType bool) {
	if f.Name == FormatDoctrine {
		prepareDoctrine(e)
		return
	}
	if isLaravel(f.Name) {
		prepareLaravel(e, f.Name)
		return
	}
	if f.Name != FormatMessenger || e.Invalid != "" || e.Envelope != nil {
		return
	}
	class, ok := f.Classes[e.EventType]
	if !ok {
		class = f.fallback()
	}
	if class == "" {
		e.Invalid = fmt.Sprintf("event_type %q has no Messenger message class; map it with --messenger-class %s=<Class>", e.EventType, e.EventType)
		return
	}
	if reason := messengerBodyProblem(e.Payload); reason != "" {
		e.Invalid = reason
		return
	}
	for _, s := range []struct{ name, v string }{
		{FieldMessageID, e.MessageID}, {FieldAggregateType, e.AggregateType}, {FieldAggregateID, e.AggregateID}, {FieldEventType, e.EventType},
	} {
		if !utf8.ValidString(s.v) {
			e.Invalid = s.name + " is not valid UTF-8, which the JSON of Messenger's envelope needs (PHP's json_decode would reject the entry)"
			return
		}
	}
	for _, fl := range e.Fields {
		if !utf8.ValidString(fl.Value) {
			e.Invalid = fl.Name + " is not valid UTF-8, which the JSON of Messenger's envelope needs (PHP's json_decode would reject the entry)"
			return
		}
	}
	e.Envelope = f.envelope(class, e, withAggregateType)
}

// Delayed reports whether e, prepared, goes to its stream's delayed set
// (DelayedSuffix) rather than to the stream, and its score there.
func (f *Format) Delayed(e *outbox.Event) (due int64, ok bool) {
	if e.Invalid != "" {
		return 0, false
	}
	switch f.Name {
	case FormatDoctrine:
		return doctrineDue(e)
	case FormatLaravelQueue, FormatLaravelStream:
		return laravelDue(e)
	}
	return 0, false
}

// DelayedSuffix makes the key of a stream's delayed set from the stream's.
func (f *Format) DelayedSuffix() string {
	if isLaravel(f.Name) {
		return LaravelDelayedSuffix
	}
	return DelayedSetSuffix
}

// ToList reports whether e, prepared, goes to a Laravel queue's list (RPUSH,
// with a notification) rather than to a stream.
func (f *Format) ToList(e *outbox.Event) bool {
	return f.Name == FormatLaravelQueue && e.Invalid == "" && len(e.Envelope) > 0 && e.Envelope[0] == laravelNow
}

// Member is what a delayed event, prepared, is written as in its delayed
// set (Delayed): the envelope, or a Laravel job's JobBody.
func (f *Format) Member(e *outbox.Event) []byte {
	if isLaravel(f.Name) {
		return JobBody(e)
	}
	return e.Envelope
}

// messengerBodyProblem says why Messenger's JSON Serializer could not decode
// payload as a message body, or "". Its decode refuses a body PHP's empty()
// holds empty ("" and "0"), and the Symfony Serializer's JSON decoder one
// that is not JSON; json_decode of the envelope fails on invalid UTF-8.
func messengerBodyProblem(payload []byte) string {
	switch {
	case !utf8.Valid(payload):
		return "payload is not valid UTF-8, which Messenger's JSON serializer cannot decode"
	case len(payload) == 0 || string(payload) == "0":
		return fmt.Sprintf("payload %q is empty to PHP, and Messenger's Serializer rejects an empty body", payload)
	case !json.Valid(payload):
		return "payload is not valid JSON, which Messenger's JSON serializer cannot decode"
	}
	return ""
}

// envelope encodes Messenger's envelope of e: the payload as the body, the
// class as the type header, the outbox fields as headers and, with Stamp, as
// the stamp header's serialized stamp list ([{"messageId": ...}], the names
// of the stamp's constructor arguments).
func (f *Format) envelope(class string, e *outbox.Event, withAggregateType bool) []byte {
	occurred := e.OccurredAt.UTC().Format(OccurredAtLayout)
	b := make([]byte, 0, len(e.Payload)+len(e.Payload)/8+256+len(class)+2*(len(e.MessageID)+len(e.AggregateType)+len(e.AggregateID)+len(e.EventType)))
	b = append(b, `{"body":`...)
	b = appendJSONString(b, e.Payload)
	b = append(b, `,"headers":{`...)
	b = appendJSONPair(b, messengerHeaderType, class, false)
	b = appendJSONPair(b, messengerHeaderContentType, messengerContentType, true)
	b = appendJSONPair(b, FieldMessageID, e.MessageID, true)
	if withAggregateType {
		b = appendJSONPair(b, FieldAggregateType, e.AggregateType, true)
	}
	b = appendJSONPair(b, FieldAggregateID, e.AggregateID, true)
	b = appendJSONPair(b, FieldEventType, e.EventType, true)
	b = appendJSONPair(b, FieldOccurredAt, occurred, true)
	// schema_version and --extra-column travel as headers too, for a
	// serializer or middleware that reads them.
	for _, fl := range e.Fields {
		b = appendJSONPair(b, fl.Name, fl.Value, true)
	}
	if f.Stamp != "" {
		s := make([]byte, 0, 128+len(e.MessageID)+len(e.AggregateType)+len(e.AggregateID)+len(e.EventType))
		s = append(s, '[', '{')
		s = appendJSONPair(s, "messageId", e.MessageID, false)
		if withAggregateType {
			s = appendJSONPair(s, "aggregateType", e.AggregateType, true)
		}
		s = appendJSONPair(s, "aggregateId", e.AggregateID, true)
		s = appendJSONPair(s, "eventType", e.EventType, true)
		s = appendJSONPair(s, "occurredAt", occurred, true)
		s = appendJSONPair(s, "outboxId", strconv.FormatUint(e.OutboxID, 10), true)
		s = append(s, '}', ']')
		b = append(b, ',')
		b = appendJSONString(b, messengerStampPrefix+f.Stamp)
		b = append(b, ':')
		b = appendJSONString(b, s)
	}
	return append(b, '}', '}')
}

func appendJSONPair(b []byte, name, value string, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = appendJSONString(b, name)
	b = append(b, ':')
	return appendJSONString(b, value)
}

// appendJSONString appends s as a JSON string. s must be valid UTF-8 (prepare
// checks): the bytes are kept as they are, escaped only where JSON requires
// it, so that the body PHP's json_decode hands to Messenger is the payload
// byte for byte.
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
