// Package position describes where a binlog relay stands: the binlog file and
// offset (and, in GTID mode, the GTID set) after the last transaction whose
// outbox rows were appended, plus how many rows of the next transaction were
// already appended when a huge transaction is delivered in chunks.
//
// A position is stored in Redis next to the streams and replaced in the same
// atomic step as the appends it covers (see package redisstream), so it never
// runs ahead of, or behind, what consumers can read.
package position

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// Flavors of server a position can belong to.
const (
	FlavorMySQL   = "mysql"
	FlavorMariaDB = "mariadb"
)

// Binlog is a relay's resume point in a server's binlog.
type Binlog struct {
	// Flavor is "mysql" or "mariadb"; GTID sets of the two are not comparable.
	Flavor string `json:"flavor"`
	// ServerID and ServerUUID (MySQL only) identify the server the file
	// position belongs to: file positions are server-local, so resuming one
	// on another server after a failover would read the wrong events.
	ServerID   uint32 `json:"server_id"`
	ServerUUID string `json:"server_uuid,omitempty"`

	// File and Pos point at the start of the next transaction to read.
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	// GTIDSet, when not empty, is the set of transactions already read and the
	// relay resumes by GTID (MySQL COM_BINLOG_DUMP_GTID, MariaDB
	// slave_connect_state), which survives a failover to another server.
	GTIDSet string `json:"gtid_set,omitempty"`
	// EmptyGTIDSet says the relay resumes by GTID from the empty set (no
	// transaction read yet, on a server whose binlog holds none before the
	// start): GTIDSet is then "" and File and Pos only inform.
	EmptyGTIDSet bool `json:"empty_gtid_set,omitempty"`
	// LastGTID is the GTID of the last transaction read, for operators.
	LastGTID string `json:"last_gtid,omitempty"`

	// TxRows counts the outbox rows of the transaction at File:Pos (or right
	// after GTIDSet) already appended. It is non-zero only while a transaction
	// too large to buffer is appended in chunks; a resume skips that many rows
	// of the transaction instead of appending them again.
	TxRows uint64 `json:"tx_rows,omitempty"`

	// Writer identifies the relay process that wrote the position and Seq
	// counts its writes; together they tell a position another relay wrote
	// (fencing) from an older one of our own (Redis lost writes).
	Writer string `json:"writer,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	// UpdatedAt is when the position was written, for operators.
	UpdatedAt time.Time `json:"updated_at"`

	// Repair, when set, marks the position as held by `repair --apply`
	// (the coordinates above are where it started from): no relay starts
	// on it and every relay's append is refused (the compare-and-set
	// finds it), until repair stores the position it ends at, which has
	// none, or `position set` replaces it. Positions written before it
	// existed decode with none.
	Repair RepairHold `json:"repair,omitzero"`
}

// RepairHold says who holds a position marked by repair, and since when.
type RepairHold struct {
	// Holder names the repair: "repair <host>/<pid>".
	Holder string `json:"holder"`
	// Since is when it marked the position.
	Since time.Time `json:"since"`
}

// IsZero reports whether no repair holds the position.
func (h RepairHold) IsZero() bool { return h.Holder == "" && h.Since.IsZero() }

// String renders the hold for operators: who, since when.
func (h RepairHold) String() string {
	return h.Holder + " since " + h.Since.UTC().Format(time.RFC3339)
}

// Repairing reports whether a repair holds the position (Binlog.Repair).
func (b Binlog) Repairing() bool { return !b.Repair.IsZero() }

// HeldBy returns the position marked as held by the repair holder since
// since: the same coordinates, writer and sequence number.
func (b Binlog) HeldBy(holder string, since time.Time) Binlog {
	b.Repair = RepairHold{Holder: holder, Since: since.UTC()}
	return b
}

// RepairError is the refusal of a relay that finds the position at key
// ("": unnamed) marked by a repair, nil when it is not: whatever the relay
// would append, the repair may append too.
func (b Binlog) RepairError(key string) error {
	if !b.Repairing() {
		return nil
	}
	at := ""
	if key != "" {
		at = " at " + key
	}
	return outbox.WithHint(fmt.Errorf("%w%s: %s", outbox.ErrRepairing, at, b.Repair),
		"wait for `binlog-outbox repair --apply` to end (it stores the position the relay goes on from) and start the relay again; "+
			"if it died (its process is gone), run `binlog-outbox repair --apply` again, which finishes from the marked position, "+
			"or store a position deliberately with `binlog-outbox position set` (docs/incidents.md)")
}

// GTIDMode reports whether the relay resumes by GTID set rather than file and offset.
func (b Binlog) GTIDMode() bool { return b.GTIDSet != "" || b.EmptyGTIDSet }

// ResumesByGTID reports whether a relay of a server of flavor, whose
// gtid_mode (MySQL) is gtidMode, stores GTID positions by default: every
// MariaDB transaction has a GTID; on MySQL only gtid_mode ON promises one
// (the permissive modes mix in anonymous transactions, which a GTID
// position cannot locate). A GTID position survives a failover to another
// server of the topology, a file position does not.
func ResumesByGTID(flavor, gtidMode string) bool {
	return flavor == FlavorMariaDB || strings.EqualFold(strings.TrimSpace(gtidMode), "ON")
}

// String renders the position for logs and `position show`.
func (b Binlog) String() string {
	return format(b.File, b.Pos, b.GTIDSet, b.GTIDMode(), b.TxRows)
}

// Encode serialises the position as JSON: readable with redis-cli GET.
func (b Binlog) Encode() []byte {
	out, err := json.Marshal(b)
	if err != nil {
		// Every field is a plain value; Marshal cannot fail.
		panic(fmt.Sprintf("encode position: %v", err))
	}
	return out
}

// Decode parses a stored position and checks that it is usable.
func Decode(data []byte) (Binlog, error) {
	var b Binlog
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Binlog{}, fmt.Errorf("decode position %q: %w", logging.Truncate(string(data), 200), err)
	}
	if err := b.Validate(); err != nil {
		return Binlog{}, err
	}
	return b, nil
}

// Validate checks that the position can be resumed from.
func (b Binlog) Validate() error {
	if b.Flavor != FlavorMySQL && b.Flavor != FlavorMariaDB {
		return fmt.Errorf("position: flavor %q is neither %s nor %s", b.Flavor, FlavorMySQL, FlavorMariaDB)
	}
	if b.Repairing() && (b.Repair.Holder == "" || b.Repair.Since.IsZero()) {
		return fmt.Errorf("position: repair mark %+v without its holder or time", b.Repair)
	}
	if b.EmptyGTIDSet && b.GTIDSet != "" {
		return fmt.Errorf("position: empty_gtid_set with gtid_set %q", logging.Truncate(b.GTIDSet, 100))
	}
	if !b.GTIDMode() {
		if b.File == "" {
			return errors.New("position: neither a binlog file nor a GTID set")
		}
		if b.Pos < 4 {
			return fmt.Errorf("position: offset %d in %s is before the first event (4)", b.Pos, b.File)
		}
	}
	return nil
}

// Start says where a relay without a stored position starts.
type Start struct {
	// Kind is one of StartNow, StartEarliest, StartFilePos, StartGTID.
	Kind    StartKind
	File    string
	Pos     uint32
	GTIDSet string
}

// StartKind enumerates the --start-from choices.
type StartKind int

// The --start-from choices.
const (
	StartNow StartKind = iota
	StartEarliest
	StartFilePos
	StartGTID
)

var (
	filePosRE    = regexp.MustCompile(`^([^\s:/\\]+\.[0-9]+):([0-9]+)$`)
	mysqlGTIDRE  = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(:[A-Za-z_][A-Za-z0-9_]{0,31})?(:[0-9]+(-[0-9]+)?)+$`)
	mariaGTIDRE  = regexp.MustCompile(`^[0-9]+-[0-9]+-[0-9]+$`)
	startFromMsg = "use now, earliest, <binlog-file>:<offset> (e.g. mysql-bin.000003:4) or a GTID set (MySQL uuid:1-42, MariaDB 0-1-42)"
)

// ParseStart parses a --start-from value.
func ParseStart(s string) (Start, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "now":
		return Start{Kind: StartNow}, nil
	case "earliest":
		return Start{Kind: StartEarliest}, nil
	}
	if m := filePosRE.FindStringSubmatch(s); m != nil {
		pos, err := strconv.ParseUint(m[2], 10, 32)
		if err != nil || pos < 4 {
			return Start{}, outbox.WithHint(fmt.Errorf("%w: --start-from %q: offset must be between 4 and %d", outbox.ErrConfig, s, uint32(1<<32-1)), "%s", startFromMsg)
		}
		return Start{Kind: StartFilePos, File: m[1], Pos: uint32(pos)}, nil
	}
	if isGTIDSet(s) {
		return Start{Kind: StartGTID, GTIDSet: s}, nil
	}
	return Start{}, outbox.WithHint(fmt.Errorf("%w: --start-from %q is not a position", outbox.ErrConfig, logging.Truncate(s, 100)), "%s", startFromMsg)
}

func isGTIDSet(s string) bool {
	parts := strings.Split(s, ",")
	flavor := ""
	for _, p := range parts {
		p = strings.TrimSpace(p)
		var f string
		switch {
		case mariaGTIDRE.MatchString(p):
			f = FlavorMariaDB
		case mysqlGTIDRE.MatchString(p):
			f = FlavorMySQL
		default:
			return false
		}
		if flavor != "" && f != flavor {
			return false
		}
		flavor = f
	}
	return true
}
