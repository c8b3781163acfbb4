package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/testkit/testsvc"
)

// redisCPU returns the CPU time Redis's main thread has used, in
// microseconds (INFO cpu).
func redisCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", line, err)
			}
			sum += f
		}
	}
	return sum * 1e6
}

// BenchmarkAppend_RedisCPU measures what Redis spends per entry on the append
// script, on the MULTI path and on go-redis pipelining the same XADDs (the
// baseline, without any position), for the same batches: redis-us/entry is
// the CPU time of Redis's main thread (INFO cpu) per entry appended.
//
//	go test -run '^$' -bench BenchmarkAppend_RedisCPU -benchtime 2000x ./redisstream/
func BenchmarkAppend_RedisCPU(b *testing.B) {
	r := testsvc.StartRedis(b, testsvc.RedisOptions{})
	admin := r.Client(b, r.URL(0))
	ctx := context.Background()
	for _, size := range []int{1, 10, 100} {
		for _, path := range []string{"xadd", "script", "multi"} {
			b.Run(fmt.Sprintf("batch=%d/%s", size, path), func(b *testing.B) {
				admin.FlushAll(ctx)
				multiMin := -1
				if path == "multi" {
					multiMin = 1
				}
				s, c := newSink(b, r.URL(0), Config{MultiMin: multiMin})
				batch := make([]outbox.Event, size)
				var prev []byte
				var pairs []any
				start := redisCPU(b, admin)
				b.ResetTimer()
				for i := range b.N {
					for j := range batch {
						batch[j] = event(uint64(i*size+j), []string{"order", "invoice"}[j%2], "a-1")
					}
					next := []byte(strconv.Itoa(i + 1))
					if path == "xadd" {
						_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
							for j := range batch {
								s.Prepare(&batch[j])
								pairs = append(pairs[:0], "XADD", s.streamKey(&batch[j]), "*")
								pairs = s.appendFields(pairs, &batch[j])
								p.Do(ctx, append([]any(nil), pairs...)...)
							}
							return nil
						})
						if err != nil {
							b.Fatal(err)
						}
						continue
					}
					if err := s.Append(ctx, batch, prev, next); err != nil {
						b.Fatal(err)
					}
					prev = next
				}
				b.StopTimer()
				b.ReportMetric((redisCPU(b, admin)-start)/float64(b.N*size), "redis-us/entry")
			})
		}
	}
}
