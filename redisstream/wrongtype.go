package redisstream

import (
	"fmt"
	"sync"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// A key where the template puts a stream may hold another type (a string
// another application SET there): Redis refuses every XADD to it, and the
// append scripts refuse the whole batch before they write. Retrying the
// batch would stall every aggregate for good. Instead the sink remembers
// the key for a while, and Prepare makes the events bound for it dead
// letters with the reason, so the rest flow; a key fixed meanwhile is
// appended to again once the memory lapses.

// wrongTypeMemory is how long the sink dead-letters the events of a key
// it found of another type before it tries the key again.
const wrongTypeMemory = time.Minute

// WrongTypeError is a refused append: the key holds another type than the
// stream (or delayed set) the template puts there. Nothing was written;
// the sink dead-letters the key's events from the next read on.
type WrongTypeError struct {
	Key, Type, Want string
}

func (e *WrongTypeError) Error() string {
	return fmt.Sprintf("%s holds a %s, not a %s: its events go to the dead-letter stream", e.Key, e.Type, e.Want)
}

// reason is a dead letter's reason for an event whose stream is e's key.
func (e *WrongTypeError) reason() string {
	return fmt.Sprintf("its stream %s holds a %s, not a %s: another application uses the key; rename or delete that key, or give --stream a prefix of its own, then replay the dead letter (binlog-outbox dead-letters replay)",
		e.Key, e.Type, e.Want)
}

// wrongTypes remembers the keys of another type, each until it lapses.
// Prepare (the reader's goroutine) reads it while Append (the flusher's)
// adds to it.
type wrongTypes struct {
	mu    sync.Mutex
	keys  map[string]wrongKey
	empty bool // no key remembered: Prepare's fast path
}

type wrongKey struct {
	reason string
	until  time.Time
}

func newWrongTypes() *wrongTypes { return &wrongTypes{empty: true} }

// add remembers e's key.
func (w *wrongTypes) add(e *WrongTypeError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[string]wrongKey{}
	}
	w.keys[e.Key] = wrongKey{reason: e.reason(), until: time.Now().Add(wrongTypeMemory)}
	w.empty = false
}

// reasonFor is the dead letter's reason of an event bound for key, "" when
// key is not remembered (any more).
func (w *wrongTypes) reasonFor(key string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.empty {
		return ""
	}
	k, ok := w.keys[key]
	if !ok {
		return ""
	}
	if time.Now().After(k.until) {
		delete(w.keys, key)
		w.empty = len(w.keys) == 0
		return ""
	}
	return k.reason
}

// any reports whether some key is remembered.
func (w *wrongTypes) any() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.empty
}

// wrongType remembers the key of a refused append and returns the error
// for it: retryable, so that the reader reads the batch again, and its
// events for the key become dead letters.
func (s *base) wrongType(n int, key, typ, want string) error {
	e := &WrongTypeError{Key: key, Type: typ, Want: want}
	s.wrong.add(e)
	return fmt.Errorf("append %d events: %w", n, e)
}

// deadLetterWrongType marks e a dead letter when its stream's key holds
// another type.
func (s *base) deadLetterWrongType(e *outbox.Event) {
	if e.Invalid != "" || !s.wrong.any() {
		return
	}
	if r := s.wrong.reasonFor(s.streamKey(e)); r != "" {
		e.Invalid = r
	}
}
