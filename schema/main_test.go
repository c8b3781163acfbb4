package schema

import (
	"testing"

	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }
