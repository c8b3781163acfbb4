package canal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/replication"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/binlogrow"
	"github.com/binlog-outbox/binlog-outbox/schema"
)

// Source is one --table value the reader follows: a table, or a pattern
// whose tables are followed from wherever the binlog first names them, those
// created while the relay runs included.
type Source struct {
	// Pattern names the tables. An exact one is resolved to the server's
	// name for it once (schema.ResolveName), unless Tables has it.
	Pattern schema.Pattern
	// Mapping maps the logical columns of a table of the source that
	// Tables does not list, one created after the start: by the names the
	// rows carry, or by a layout proven from the table's first rows on.
	Mapping schema.Mapping
	// Tables are the source's tables the caller inspected, with the mapping
	// resolved against each (schema.Resolution's Mapping and Absent).
	Tables []Table
}

// Table is a followed table as the caller inspected it.
type Table struct {
	Name    schema.Name
	Mapping schema.Mapping
	// Absent are the optional logical columns the table lacked: see
	// Config.Absent.
	Absent []string
}

// sourceSet is what the reader follows, resolved once: it never changes
// afterwards, so go-mysql's parsing goroutine asks it too (binlogrow.DecodeConfig).
type sourceSet struct {
	lctn     int
	patterns schema.Patterns
	list     []Source
	known    map[string]knownTable // by tableKey
	extra    []schema.ExtraColumn
}

// knownTable is a table the caller inspected, with its key in known: a
// session that follows the table keys it by the same string rather than
// one of its own.
type knownTable struct {
	Table
	key string
}

// tableKey is how the reader tells tables apart: as the server compares
// their names.
func tableKey(db, table string, lctn int) string {
	if lctn != 0 {
		db, table = strings.ToLower(db), strings.ToLower(table)
	}
	return db + "\x00" + table
}

// newSourceSet indexes list's tables, and then drops them from list: known
// holds them from here on. The tables of a pattern nearly always resolve
// to the same mapping, and a mapping kept per table (a map each) was most of
// the relay's live heap with a thousand tenants, which the garbage collector
// marked in every cycle: identical mappings and absent lists are kept once,
// and where the key is the names as they are, the names are parts of it.
func newSourceSet(list []Source, lctn int, extra []schema.ExtraColumn) *sourceSet {
	s := &sourceSet{lctn: lctn, list: list, known: make(map[string]knownTable, countTables(list)), extra: extra}
	var in interner
	for i := range list {
		if list[i].Mapping == nil {
			list[i].Mapping = schema.DefaultMapping()
		}
		list[i].Mapping = in.mapping(list[i].Mapping)
		s.patterns = append(s.patterns, list[i].Pattern)
		for _, t := range list[i].Tables {
			if t.Mapping == nil {
				t.Mapping = list[i].Mapping
			}
			t.Mapping, t.Absent = in.mapping(t.Mapping), in.absent(t.Absent)
			key := tableKey(t.Name.Database, t.Name.Table, lctn)
			if lctn == 0 {
				t.Name.Database, t.Name.Table = key[:len(t.Name.Database)], key[len(t.Name.Database)+1:]
			}
			s.known[key] = knownTable{Table: t, key: key}
		}
		list[i].Tables = nil
	}
	return s
}

func countTables(list []Source) int {
	n := 0
	for _, src := range list {
		n += len(src.Tables)
	}
	return n
}

// interner returns one of the equal mappings and absent lists it was
// given. It compares with the few distinct ones seen (maxInterned), so
// that a thousand tables of one pattern cost a thousand comparisons.
type interner struct {
	mappings []schema.Mapping
	absents  [][]string
}

const maxInterned = 16

func (in *interner) mapping(m schema.Mapping) schema.Mapping {
	return intern(&in.mappings, m, maps.Equal)
}

func (in *interner) absent(a []string) []string {
	if len(a) == 0 {
		return nil
	}
	return intern(&in.absents, a, slices.Equal)
}

// intern returns the first of seen equal to v, else v, which it adds to
// seen while it has fewer than maxInterned.
func intern[T any](seen *[]T, v T, equal func(a, b T) bool) T {
	for _, s := range *seen {
		if equal(s, v) {
			return s
		}
	}
	if len(*seen) < maxInterned {
		*seen = append(*seen, v)
	}
	return v
}

// matches reports whether rows of database.table are relayed.
func (s *sourceSet) matches(database, table string) bool {
	return s.patterns.Index(database, table, s.lctn) >= 0
}

// matchesFold is matches in any letter case: a DDL statement may name a
// followed table otherwise than the binlog's rows do, and a false yes only
// costs proving a layout again.
func (s *sourceSet) matchesFold(database, table string) bool {
	for _, p := range s.patterns {
		if p.MatchesFold(database, table) {
			return true
		}
	}
	return false
}

// String names what is followed, for messages: "app.outbox" for one table.
func (s *sourceSet) String() string { return s.patterns.String() }

// resolveSources replaces exact names with the server's, once: compared
// with the binlog, a name the server folds differently, or one of no table,
// would skip every row while the position moves on.
func (r *Reader) resolveSources(ctx context.Context) error {
	if r.sources != nil {
		return nil
	}
	fail := func(err error) error {
		if errors.Is(err, schema.ErrTableNotFound) {
			return fmt.Errorf("%w: %w", outbox.ErrConfig, err)
		}
		return err
	}
	if len(r.cfg.Sources) == 0 {
		n := r.cfg.Name
		if n.Table == "" {
			var err error
			if n, err = schema.ResolveName(ctx, r.db, r.cfg.Database, r.cfg.Table); err != nil {
				return fail(err)
			}
		}
		r.sources = newSourceSet([]Source{{
			Pattern: schema.Pattern{Database: n.Database, Table: n.Table},
			Mapping: r.cfg.Mapping,
			Tables:  []Table{{Name: n, Mapping: r.cfg.Mapping, Absent: r.cfg.Absent}},
		}}, n.LowerCaseTableNames, r.cfg.Extra)
		return nil
	}
	lctn, err := schema.LowerCaseTableNames(ctx, r.db)
	if err != nil {
		return err
	}
	list := make([]Source, len(r.cfg.Sources))
	copy(list, r.cfg.Sources)
	for i, src := range list {
		if !src.Pattern.Exact() || len(src.Tables) > 0 {
			continue
		}
		n, err := schema.ResolveName(ctx, r.db, src.Pattern.Database, src.Pattern.Table)
		if err != nil {
			return fail(err)
		}
		list[i].Pattern = schema.Pattern{Database: n.Database, Table: n.Table}
	}
	r.sources = newSourceSet(list, lctn, r.cfg.Extra)
	// The set holds the tables now: the configuration's copy of them
	// would keep every table's mapping alive.
	r.cfg.Sources = list
	return nil
}

// followed is a table of a session that the binlog named: its decoder and
// the DDL ahead of the session's start that bounds its proven layout.
type followed struct {
	name     schema.Name
	dec      *binlogrow.Decoder
	ddlAhead *ddlEvent
	// n is 1 + the table's index in tableSet.list.
	n int32
}

// tableSet is a session's view of the followed tables: a decoder per table
// as the binlog names them, made when the first rows of it arrive, with
// the layout the session proved for it, if any.
type tableSet struct {
	src   *sourceSet
	proof layoutProof
	byKey map[string]*followed
	// list holds the followed tables in the order they were first named,
	// for named to refer to by number.
	list []*followed
	// The table map of the last rows event, and what it named (nil:
	// another table): a transaction's rows events share their table map.
	lastTM *replication.TableMapEvent
	lastF  *followed
	// named are the tables the binlog's names stand for, as lookup found
	// them: 1 + their index in list, 0 for a table not followed.
	named nameCache[int32]
	// matches reports whether the rows of the table a table map names are
	// relayed, as sourceSet.matches does.
	matches func(*replication.TableMapEvent) bool
	// collations name the character set of each collation id, for the
	// decoders (binlogrow.NewDecoder).
	collations map[uint64]string
	// shared are the decoders of tables without a proven layout.
	shared map[decoderKey]*binlogrow.Decoder
}

func newTableSet(src *sourceSet, proof layoutProof, collations map[uint64]string) *tableSet {
	return &tableSet{src: src, proof: proof, byKey: map[string]*followed{}, matches: tableMatcher(src.matches), collations: collations}
}

// lookup returns the followed table tm names, or nil.
func (ts *tableSet) lookup(tm *replication.TableMapEvent) *followed {
	if tm == ts.lastTM && tm != nil {
		return ts.lastF
	}
	var f *followed
	n, known := ts.named.get(tm)
	if known {
		if n > 0 {
			f = ts.list[n-1]
		}
	} else {
		db, table := string(tm.Schema), string(tm.Table)
		key := tableKey(db, table, ts.src.lctn)
		f = ts.byKey[key]
		if f == nil {
			i := ts.src.patterns.Index(db, table, ts.src.lctn)
			if i >= 0 {
				f = ts.follow(i, db, table, key)
			}
		}
		n = 0
		if f != nil {
			n = f.n
		}
		ts.named.put(tm, n)
	}
	ts.lastTM, ts.lastF = tm, f
	return f
}

// follow starts following a table of source i: with the mapping resolved
// against it at start, or the source's for a table created since.
func (ts *tableSet) follow(i int, db, table, key string) *followed {
	k, ok := ts.src.known[key]
	t := k.Table
	if ok {
		// The set's key, not the one lookup built: the session keeps no
		// strings of its own for the tables inspected at start.
		key = k.key
	} else {
		t = Table{Name: schema.Name{Database: db, Table: table, LowerCaseTableNames: ts.src.lctn}, Mapping: ts.src.list[i].Mapping}
	}
	f := &followed{name: t.Name, dec: ts.decoder(t, ts.proof.columns[key]), ddlAhead: ts.proof.ddlFor(db, table)}
	ts.add(key, f)
	return f
}

// add makes f the followed table of key.
func (ts *tableSet) add(key string, f *followed) {
	ts.list = append(ts.list, f)
	f.n = int32(len(ts.list))
	ts.byKey[key] = f
}

// decoderKey names what a decoder of rows with column names depends on
// besides the table map: the mapping and the absent columns, as
// newSourceSet keeps them once for the tables they are equal for.
type decoderKey struct {
	mapping unsafe.Pointer
	absent  *string
}

// decoder returns a decoder for the rows of t. Tables without a proven
// layout (their rows carry column names) share one per mapping: a decoder
// and its layout per table were a tenth of the relay's live heap with a
// thousand tenants, and the layout cache compares each table map with the
// last whatever table it names.
func (ts *tableSet) decoder(t Table, columns []binlogrow.Column) *binlogrow.Decoder {
	if columns != nil {
		return binlogrow.NewDecoder(t.Mapping, ts.src.extra, columns, t.Absent, ts.collations)
	}
	k := decoderKey{mapping: reflect.ValueOf(t.Mapping).UnsafePointer()}
	if len(t.Absent) > 0 {
		k.absent = &t.Absent[0]
	}
	d := ts.shared[k]
	if d == nil {
		d = binlogrow.NewDecoder(t.Mapping, ts.src.extra, nil, t.Absent, ts.collations)
		if ts.shared == nil {
			ts.shared = map[decoderKey]*binlogrow.Decoder{}
		}
		ts.shared[k] = d
	}
	return d
}

// proven returns a copy of the layouts in force: those of the session's
// proof that no DDL in the stream ended since.
func (ts *tableSet) proven() map[string][]binlogrow.Column {
	return maps.Clone(ts.proof.columns)
}

// forget drops what the session knows of the layout of database.table (any
// letter case) at a DDL on it: rows without names after it need it proven
// again.
func (ts *tableSet) forget(database, table string) {
	for _, f := range ts.byKey {
		if strings.EqualFold(f.name.Database, database) && strings.EqualFold(f.name.Table, table) {
			f.dec.Forget()
			f.ddlAhead = nil
		}
	}
	ts.proof.forget(database, table)
}
