package admin

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// maxAgeDays is the oldest --older-than, a century: older rows are no
// retention policy but a typo.
const maxAgeDays = 36525

// ageRE splits an age into weeks, days and a Go duration for the rest.
var ageRE = regexp.MustCompile(`^(?:([0-9]{1,5})w)?(?:([0-9]{1,6})d)?(.*)$`)

// ParseAge parses --older-than (cleanup, dead-letters purge): a Go duration (36h, 90m) that may start
// with weeks and days, which Go durations lack (7d, 2w, 1d12h).
func ParseAge(s string) (time.Duration, error) {
	bad := fmt.Errorf("--older-than %q: want a positive duration such as 7d, 36h or 1d12h", s)
	if s == "" {
		return 0, errors.New("--older-than is required: say how old a relayed row must be to be deleted, e.g. --older-than 7d")
	}
	m := ageRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil || m[0] == "" {
		return 0, bad
	}
	weeks, _ := strconv.Atoi(m[1])
	days, _ := strconv.Atoi(m[2])
	days += weeks * 7
	var rest time.Duration
	if m[3] != "" {
		var err error
		if rest, err = time.ParseDuration(m[3]); err != nil || rest < 0 {
			return 0, bad
		}
	}
	// A century bounds both parts, so that their sum cannot overflow.
	if days > maxAgeDays || rest > maxAgeDays*24*time.Hour {
		return 0, bad
	}
	d := time.Duration(days)*24*time.Hour + rest
	if d <= 0 {
		return 0, bad
	}
	return d, nil
}
