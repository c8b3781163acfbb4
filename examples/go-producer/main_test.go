package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

var ulidRE = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

func TestNewULID(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	a, b := newULID(now), newULID(now)
	for _, id := range []string{a, b} {
		if !ulidRE.MatchString(id) {
			t.Errorf("newULID = %q, want 26 characters of Crockford base32", id)
		}
	}
	if a == b {
		t.Errorf("two ULIDs of the same millisecond are equal: %s", a)
	}
	// The first 10 characters are the time: decode them back.
	var ms int64
	for _, c := range a[:10] {
		ms = ms<<5 | int64(strings.IndexRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", c))
	}
	if ms != now.UnixMilli() {
		t.Errorf("time part of %s decodes to %d, want %d", a, ms, now.UnixMilli())
	}
	if later := newULID(now.Add(time.Millisecond)); later[:10] <= a[:10] {
		t.Errorf("ULID of a later millisecond %s does not sort after %s", later, a)
	}
}
