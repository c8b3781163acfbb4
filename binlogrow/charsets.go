package binlogrow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// ReadCollations reads the character set of every collation id the server
// has, for NewDecoder: the table maps of binlog_row_metadata=FULL (and MySQL's MINIMAL)
// carry a text column's collation as a number, and its bytes are in that
// collation's character set. MariaDB 10.10 and later list collations that
// apply to several character sets (uca1400) once per character set in
// COLLATION_CHARACTER_SET_APPLICABILITY only, with their ids.
func ReadCollations(ctx context.Context, db *sql.DB) (map[uint64]string, error) {
	out := map[uint64]string{}
	read := func(q string) error {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id uint64
			var cs string
			if err := rows.Scan(&id, &cs); err != nil {
				return err
			}
			out[id] = cs
		}
		return rows.Err()
	}
	if err := read(`SELECT /* binlog-outbox */ ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS
		WHERE ID IS NOT NULL AND CHARACTER_SET_NAME IS NOT NULL`); err != nil {
		return nil, fmt.Errorf("read the server's collations: %w", err)
	}
	err := read(`SELECT /* binlog-outbox */ ID, CHARACTER_SET_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY
		WHERE ID IS NOT NULL`)
	var me *mysql.MySQLError
	// 1054: no ID column there (MySQL, MariaDB before 10.10), which then
	// lists nothing COLLATIONS lacks.
	if err != nil && !(errors.As(err, &me) && me.Number == 1054) {
		return nil, fmt.Errorf("read the server's collations: %w", err)
	}
	return out, nil
}
