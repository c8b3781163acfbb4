package examples_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-outbox/binlog-outbox/examples/internal/exampletest"
	"github.com/binlog-outbox/binlog-outbox/testkit/relaytest"
)

const symfonyInstallHint = "apt-get install -y php-symfony-messenger php-symfony-redis-messenger php-symfony-serializer php-symfony-property-access php-symfony-event-dispatcher (scripts/test.sh installs them)"

// requireSymfony fails, never skips, when Debian's Symfony components the
// worker loads are missing.
func requireSymfony(t *testing.T, php string) {
	t.Helper()
	for _, file := range []string{
		"Symfony/Component/Messenger/Bridge/Redis/autoload.php", "Symfony/Component/Serializer/autoload.php",
		"Symfony/Component/PropertyAccess/autoload.php", "Symfony/Component/EventDispatcher/autoload.php",
	} {
		out, err := exec.Command(php, "-r", fmt.Sprintf("exit(stream_resolve_include_path(%q) === false ? 1 : 0);", file)).CombinedOutput()
		if err != nil {
			t.Fatalf("PHP cannot find %s on its include path (%v %s); install it with: %s", file, err, out, symfonyInstallHint)
		}
	}
	if out, err := exec.Command(php, "-r", "exit(function_exists('pcntl_signal') ? 0 : 1);").CombinedOutput(); err != nil {
		t.Fatalf("PHP lacks pcntl, which the worker's stop on SIGTERM needs (%v %s); install php-cli from Debian, which has it", err, out)
	}
}

// Messenger classes of the example's event types.
var symfonyClasses = []string{
	`order.placed=App\Message\OrderPlaced`,
	`order.paid=App\Message\OrderPaid`,
	`order.cancelled=App\Message\OrderCancelled`,
}

// TestSymfonyMessengerWorker runs a real Messenger worker (Debian's Symfony
// 5.4 or 6.4: Worker, Redis transport, Symfony serializer, retries, failure
// transport) on what the relay appends in the symfony-messenger format:
// every committed event handled once (some after a failed first attempt),
// no rolled-back one; an event type without a class in the dead-letter
// stream while the worker goes on; a message that always fails in the
// failure transport after its retries.
func TestSymfonyMessengerWorker(t *testing.T) {
	php := requirePHP(t)
	requireSymfony(t, php)
	ctx := context.Background()
	e := exampletest.NewEnv(t)
	args := []string{"--format", "symfony-messenger", "--stream", "messages", "--ensure-group", "symfony", "--messenger-stamp", `App\Messenger\OutboxStamp`}
	for _, c := range symfonyClasses {
		args = append(args, "--messenger-class", c)
	}
	exampletest.StartRelay(t, e, args...)
	rdb := e.Redis.Client(t, e.RedisURL)
	phpEnv := exampletest.PHPEnv(t, e)
	produce := func(orders, rollbackEvery int) exampletest.Produced {
		t.Helper()
		return exampletest.ParseProducerOutput(t, exampletest.RunPHP(t, php, phpEnv, filepath.Join("examples", "php", "producer.php"),
			"--orders", fmt.Sprint(orders), "--rollback-every", fmt.Sprint(rollbackEvery)))
	}

	produced := produce(12, 3)
	// An event type the relay has no class for, and one whose handler
	// always fails, between the producer's runs.
	for _, row := range [][2]string{{"unmapped-1", "order.refunded"}, {"cancelled-1", "order.cancelled"}} {
		if _, err := e.DB.Exec("INSERT INTO outbox (message_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) VALUES (?, 'order', '1', ?, '{\"order_id\":1,\"reason\":\"test\"}', UTC_TIMESTAMP(6))",
			row[0], row[1]); err != nil {
			t.Fatal(err)
		}
	}

	u := strings.TrimPrefix(e.RedisURL, "redis://")
	host, db, _ := strings.Cut(u, "/")
	worker := relaytest.StartProcess(t, php, filepath.Join(exampletest.RepoRoot(t), "examples", "symfony", "worker.php"),
		"--transport-dsn", "redis://"+host+"/messages/symfony/worker-1", "--failure-dsn", "redis://"+host+"/messages_failed/symfony/worker-1",
		"--dbindex", db, "--fail-first-every", "4",
		"--dsn", fmt.Sprintf("mysql:host=%s;port=%d;dbname=%s", e.MariaDB.Host(), e.MariaDB.Port(), e.Database), "--user", e.MariaDB.User(), "--password", e.MariaDB.Password())
	more := produce(8, 4)
	produced.Committed = append(produced.Committed, more.Committed...)
	produced.RolledBack = append(produced.RolledBack, more.RolledBack...)

	relaytest.WaitFor(t, 90*time.Second, "the worker to handle every committed event", func() bool {
		select {
		case <-worker.Done():
			t.Fatalf("worker exited early:\n%s", worker.Out.String())
		default:
		}
		return len(exampletest.ProcessedIDs(t, e.DB, "symfony")) >= len(produced.Committed) &&
			strings.Contains(fmt.Sprint(rdb.XRange(ctx, "messages_failed", "-", "+").Val()), "cancelled-1")
	})
	worker.Signal(t, syscall.SIGTERM)
	if code := worker.Wait(t, 30*time.Second); code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0", code)
	}

	exampletest.CheckExactlyOnce(t, exampletest.ProcessedIDs(t, e.DB, "symfony"), produced)
	out := worker.Out.String()
	if testing.Verbose() {
		t.Logf("worker.php:\n%s", out)
	}
	if !strings.Contains(out, "attempt=1") {
		t.Errorf("no event was handled on a retry; the handler fails the first attempt of every 4th order:\n%s", out)
	}
	if strings.Contains(out, "message_id=cancelled-1") {
		t.Errorf("the always-failing message was recorded as handled:\n%s", out)
	}
	dead := rdb.XRange(ctx, "outbox:dead-letter", "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["message_id"] != "unmapped-1" || !strings.Contains(fmt.Sprint(dead[0].Values["reason"]), "no Messenger message class") {
		t.Errorf("dead-letter stream %v, want the unmapped event with its reason", dead)
	}
	relayed := 0
	for _, m := range rdb.XRange(ctx, "messages", "-", "+").Val() {
		if _, ok := m.Values["outbox_id"]; ok {
			relayed++
		}
	}
	if want := len(produced.Committed) + 1; relayed != want {
		t.Errorf("messages holds %d of the relay's entries, want all %d: the worker must not delete them (delete_after_ack and delete_after_reject false)", relayed, want)
	}
	if p := rdb.XPending(ctx, "messages", "symfony").Val(); p.Count != 0 {
		t.Errorf("%d entries pending in the group after the worker stopped, want 0", p.Count)
	}
}
