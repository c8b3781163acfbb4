<?php
// consumer.php: the consumer half of the outbox pattern, with phpredis and PDO.
//
// It reads the stream binlog-outbox appends to with a consumer group and
// processes each event exactly once:
//
// - Each entry is processed in a database transaction that also inserts its
//   message_id into processed_messages (the inbox). Redis delivers at least
//   once (a consumer can crash between its COMMIT and its XACK; a relay in
//   poll mode can append twice), and a second delivery hits the primary key:
//   it is acknowledged and skipped.
// - XACK comes after COMMIT, never before: an entry acknowledged first and
//   lost in a crash would be lost for good.
// - Entries a crashed consumer read and never acknowledged stay pending in the
//   group; after --min-idle-ms any consumer takes them over with XAUTOCLAIM.
// - An entry delivered more than --max-deliveries times (a poison message
//   whose processing always fails) is copied to the dead-letter stream with
//   the reason and acknowledged.
//
//   php examples/php/consumer.php --stream outbox:order --group billing --consumer billing-1
//   php examples/php/consumer.php --drain   # exit when nothing is new and nothing pending
//   php examples/php/consumer.php --once    # one read (and claim) round, then exit

declare(strict_types=1);

require __DIR__ . '/common.php';

$o = options($argv, [
    'dsn' => env('EXAMPLE_PDO_DSN', 'mysql:host=127.0.0.1;port=3306;dbname=app'),
    'user' => env('EXAMPLE_DB_USER', 'app'),
    'password' => env('EXAMPLE_DB_PASSWORD', 'app'),
    'redis-host' => env('EXAMPLE_REDIS_HOST', '127.0.0.1'),
    'redis-port' => env('EXAMPLE_REDIS_PORT', '6379'),
    'redis-db' => env('EXAMPLE_REDIS_DB', '0'),
    'stream' => 'outbox:order',
    'group' => 'billing',
    // Stable across restarts of one process, unique among the group's processes.
    'consumer' => gethostname() . '-' . getmypid(),
    'dead-letter-stream' => 'outbox:dead-letter',
    'max-deliveries' => '5',
    // Longer than the slowest processing, or a slow consumer's entries are
    // claimed and processed twice (the inbox skips the second, after the work).
    'min-idle-ms' => '30000',
    'count' => '100',
    'block-ms' => '2000',
    'once' => false,
    'drain' => false,
]);

$consumer = new OutboxConsumer(pdo($o), redisClient($o), $o);
$consumer->ensureGroup();
$stop = false;
if (function_exists('pcntl_async_signals')) {
    pcntl_async_signals(true);
    pcntl_signal(SIGTERM, function () use (&$stop) { $stop = true; });
    pcntl_signal(SIGINT, function () use (&$stop) { $stop = true; });
}
while (!$stop) {
    $block = $o['drain'] ? 200 : (int) $o['block-ms'];
    [$read, $claimed] = $consumer->step($block);
    if ($o['once']) {
        break;
    }
    if ($o['drain'] && $read === 0 && $claimed === 0 && $consumer->pending() === 0) {
        break;
    }
}
$s = $consumer->stats;
printf("processed=%d duplicates=%d failed=%d dead_lettered=%d claimed=%d\n",
    $s['processed'], $s['duplicates'], $s['failed'], $s['dead_lettered'], $s['claimed']);

function redisClient(array $o): Redis
{
    $redis = new Redis();
    $redis->connect($o['redis-host'], (int) $o['redis-port'], 5.0);
    // A blocking XREADGROUP must not hit the client's read timeout.
    $redis->setOption(Redis::OPT_READ_TIMEOUT, (string) ((int) $o['block-ms'] / 1000 + 10));
    $redis->select((int) $o['redis-db']);
    return $redis;
}

final class OutboxConsumer
{
    public array $stats = ['processed' => 0, 'duplicates' => 0, 'failed' => 0, 'dead_lettered' => 0, 'claimed' => 0];

    public function __construct(private PDO $pdo, private Redis $redis, private array $o)
    {
    }

    /**
     * ensureGroup creates the group at the start of the stream (and the stream,
     * if the relay has not appended to it yet); an existing group keeps its
     * position, which is the group's progress.
     */
    public function ensureGroup(): void
    {
        try {
            $ok = $this->redis->xGroup('CREATE', $this->o['stream'], $this->o['group'], '0', true);
            $err = $ok === false ? (string) $this->redis->getLastError() : '';
        } catch (RedisException $e) {
            $err = $e->getMessage();
        }
        // BUSYGROUP is Redis's error code for "the group exists": by protocol
        // the code is the first word of an error reply.
        if ($err !== '' && !str_starts_with($err, 'BUSYGROUP')) {
            throw new RuntimeException("XGROUP CREATE {$this->o['stream']} {$this->o['group']}: $err");
        }
        $this->redis->clearLastError();
    }

    /**
     * step claims entries left pending longer than min-idle (by crashed
     * consumers, or by this one before a restart), then reads new ones, and
     * processes them. It returns how many were read and claimed.
     */
    public function step(int $blockMs): array
    {
        $claimed = $this->claim();
        $this->stats['claimed'] += count($claimed);
        foreach ($claimed as $id => $fields) {
            $this->deliver((string) $id, $fields, true);
        }
        $res = $this->redis->xReadGroup($this->o['group'], $this->o['consumer'], [$this->o['stream'] => '>'], (int) $this->o['count'], $blockMs);
        $read = 0;
        foreach ($res ?: [] as $entries) {
            foreach ($entries as $id => $fields) {
                $read++;
                $this->deliver((string) $id, $fields, false);
            }
        }
        return [$read, count($claimed)];
    }

    /** pending returns how many entries the group read and did not acknowledge. */
    public function pending(): int
    {
        $summary = $this->redis->xPending($this->o['stream'], $this->o['group']);
        return (int) ($summary[0] ?? 0);
    }

    /**
     * claim runs XAUTOCLAIM. phpredis has xAutoClaim() from version 6 on;
     * rawCommand works with every version.
     */
    private function claim(): array
    {
        $reply = $this->redis->rawCommand('XAUTOCLAIM', $this->o['stream'], $this->o['group'], $this->o['consumer'],
            (string) (int) $this->o['min-idle-ms'], '0-0', 'COUNT', (string) (int) $this->o['count']);
        $out = [];
        foreach ($reply[1] ?? [] as $entry) {
            [$id, $flat] = $entry;
            if ($flat === null || $flat === false) {
                continue; // deleted from the stream meanwhile (Redis 6.2 lists these)
            }
            $fields = [];
            for ($i = 0; $i + 1 < count($flat); $i += 2) {
                $fields[$flat[$i]] = $flat[$i + 1];
            }
            $out[$id] = $fields;
        }
        return $out;
    }

    private function deliver(string $id, array $fields, bool $claimed): void
    {
        if ($claimed) {
            // XAUTOCLAIM counted this delivery; XPENDING tells how many there were.
            $p = $this->redis->xPending($this->o['stream'], $this->o['group'], $id, $id, 1);
            $deliveries = (int) ($p[0][3] ?? 0);
            if ($deliveries > (int) $this->o['max-deliveries']) {
                $this->deadLetter($id, $fields, $deliveries);
                return;
            }
        }
        try {
            $duplicate = $this->process($id, $fields);
        } catch (Throwable $e) {
            // Not acknowledged: the entry stays pending and is retried after min-idle.
            $this->stats['failed']++;
            fwrite(STDERR, "processing $id failed; it stays pending: {$e->getMessage()}\n");
            return;
        }
        $this->stats[$duplicate ? 'duplicates' : 'processed']++;
        if ($duplicate) {
            fwrite(STDERR, "duplicate delivery of {$fields['message_id']} ($id) acknowledged and skipped\n");
        }
        // After COMMIT: a crash before this XACK redelivers the entry, and the
        // inbox turns the redelivery into a duplicate.
        $this->redis->xAck($this->o['stream'], $this->o['group'], [$id]);
    }

    /** process handles one event in a transaction with its inbox row; true for a duplicate. */
    private function process(string $id, array $fields): bool
    {
        $messageId = $fields['message_id'] ?? '';
        if ($messageId === '') {
            throw new RuntimeException('entry has no message_id field');
        }
        $this->pdo->beginTransaction();
        try {
            $this->pdo->prepare(
                'INSERT INTO processed_messages (consumer_group, message_id, stream, entry_id, event_type, aggregate_id, consumer)
                 VALUES (?, ?, ?, ?, ?, ?, ?)'
            )->execute([$this->o['group'], $messageId, $this->o['stream'], $id, $fields['event_type'] ?? '', $fields['aggregate_id'] ?? '', $this->o['consumer']]);
        } catch (PDOException $e) {
            $this->pdo->rollBack();
            if ((int) ($e->errorInfo[1] ?? 0) === 1062) { // ER_DUP_ENTRY: processed before
                return true;
            }
            throw $e;
        }
        try {
            $this->handle($fields);
            $this->pdo->commit();
        } catch (Throwable $e) {
            if ($this->pdo->inTransaction()) {
                $this->pdo->rollBack();
            }
            throw $e;
        }
        return false;
    }

    /**
     * handle is the business logic; it runs inside the inbox transaction, so
     * its writes with $this->pdo commit or roll back with the inbox row. This
     * one only insists on a JSON object payload, which makes a malformed
     * entry a poison message for the tests.
     */
    private function handle(array $fields): void
    {
        $payload = json_decode($fields['payload'] ?? '', false, 512, JSON_THROW_ON_ERROR);
        if (!$payload instanceof stdClass) {
            throw new RuntimeException('payload is not a JSON object');
        }
    }

    /** deadLetter copies the entry with the reason and acknowledges it, atomically (MULTI/EXEC). */
    private function deadLetter(string $id, array $fields, int $deliveries): void
    {
        $failures = $deliveries - 1;
        $fields['reason'] = "processing failed $failures times (max deliveries {$this->o['max-deliveries']})";
        $fields['source_stream'] = $this->o['stream'];
        $fields['source_entry_id'] = $id;
        $fields['consumer_group'] = $this->o['group'];
        $fields['deliveries'] = (string) $deliveries;
        $this->redis->multi();
        $this->redis->xAdd($this->o['dead-letter-stream'], '*', $fields);
        $this->redis->xAck($this->o['stream'], $this->o['group'], [$id]);
        $this->redis->exec();
        $this->stats['dead_lettered']++;
        fwrite(STDERR, "entry $id dead-lettered to {$this->o['dead-letter-stream']}: {$fields['reason']}\n");
    }
}
