package relaytest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// FillRedis fills env's Redis with other keys until it refuses writes, then
// lowers maxmemory below what it uses, so that no write slips through the
// margin: every write the relay tries fails with OOM (under noeviction)
// until the test sets maxmemory back to 0.
func FillRedis(ctx context.Context, t testing.TB, env *Env) {
	t.Helper()
	used := func() int {
		n, err := strconv.Atoi(env.RDB.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"])
		if err != nil {
			t.Fatalf("used_memory: %v", err)
		}
		return n
	}
	if err := env.RDB.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()+(1<<20))).Err(); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if err := env.RDB.Set(ctx, fmt.Sprintf("fill:%d", i), big, 0).Err(); err != nil {
			break
		}
	}
	if err := env.RDB.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()-(1<<20))).Err(); err != nil {
		t.Fatal(err)
	}
}
