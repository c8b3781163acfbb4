package position

import (
	"fmt"
	"slices"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

// GTIDSetOn parses a --start-from GTID set for a server of flavor: the
// syntax ParseStart accepts may still be the other flavor's.
func (s Start) GTIDSetOn(flavor string) (GTIDSet, error) {
	set, err := ParseGTIDSet(flavor, s.GTIDSet)
	if err != nil {
		return set, outbox.WithHint(fmt.Errorf("%w: --start-from %q: %v", outbox.ErrConfig, s.GTIDSet, err),
			"MySQL GTID sets look like 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42, MariaDB ones like 0-1-42")
	}
	return set, nil
}

// CheckFileOn refuses a --start-from <file>:<offset> whose file is not
// among logs, the server's binary logs oldest first.
func (s Start) CheckFileOn(logs []string) error {
	if s.Kind != StartFilePos || slices.Contains(logs, s.File) {
		return nil
	}
	first := "none"
	if len(logs) > 0 {
		first = logs[0] + " to " + logs[len(logs)-1]
	}
	return outbox.WithHint(fmt.Errorf("%w: --start-from %s:%d names a binlog file the server does not have (it has %d: %s)", outbox.ErrConfig, s.File, s.Pos, len(logs), first),
		"give a file that SHOW BINARY LOGS lists, or --start-from earliest (the oldest the server has) or now")
}
