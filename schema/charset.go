package schema

import (
	"fmt"
	"strings"

	"github.com/binlog-outbox/binlog-outbox/internal/charset"
)

// charsetProblem returns the problem of a text column whose character set
// the relay cannot convert to UTF-8 as the server does, "" for any other
// column. Poll mode reads through a utf8mb4 connection, so the server
// converts; binlog mode gets the bytes the table stores and converts them
// itself. Where it cannot, the two modes would deliver different bytes
// (and a mode switch would change them under the consumers), so both
// refuse the column. what names it as describe does.
func (t *Table) charsetProblem(c Column, what string) string {
	if _, ok := charset.Lookup(c.Charset); ok {
		return ""
	}
	null := "NOT NULL"
	if c.Nullable {
		null = "NULL"
	}
	return fmt.Sprintf("%s is in character set %s, which binlog mode cannot convert to UTF-8 as poll mode's connection does (the relay converts %s, and passes binary columns as they are); "+
		"convert the table with ALTER TABLE %s CONVERT TO CHARACTER SET utf8mb4, or the column alone with ALTER TABLE %s MODIFY %s %s CHARACTER SET utf8mb4 %s (restating its DEFAULT and COMMENT, if any)",
		what, c.Charset, charset.Supported, QuoteIdent(t.Name), QuoteIdent(t.Name), QuoteIdent(c.Name), strings.ToUpper(c.ColumnType), null)
}
