package schema

import (
	"testing"

	"github.com/binlog-outbox/binlog-outbox/internal/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }
