<?php

declare(strict_types=1);

namespace BinlogOutbox;

use Psr\Log\LoggerInterface;

/**
 * OutboxConsumer reads a stream binlog-outbox appends to, with a consumer
 * group, and gives each event to the handler of its event type exactly
 * once in effect:
 *
 * - The handler runs in a database transaction with the event's inbox row
 *   (Inbox). Redis delivers at least once (a worker can crash between its
 *   COMMIT and its XACK), and a second delivery finds the row: it is
 *   acknowledged and skipped.
 * - XACK follows COMMIT, never precedes it: an entry acknowledged first and
 *   lost in a crash would be lost for good.
 * - Entries pending longer than minIdleMs (read by a crashed worker, or
 *   failed) are taken over with XAUTOCLAIM, by any worker of the group.
 * - An entry whose handler keeps failing is copied to the dead-letter stream
 *   with the reason and acknowledged, after maxDeliveries deliveries.
 * - run() stops on SIGTERM and SIGINT after the entry in progress, and hands
 *   the entries it read and did not process back to the group.
 *
 *   $consumer = new OutboxConsumer($redis, new PdoInbox($pdo), new ConsumerConfig(group: 'billing', consumer: 'billing-1'));
 *   $consumer->on('order.placed', fn (Event $e) => $billing->open($e->payload['order_id']));
 *   $consumer->run();
 */
final class OutboxConsumer
{
    /** @var array<string, int> what this consumer did since it was made; the examples print it */
    public array $stats = ['processed' => 0, 'duplicates' => 0, 'skipped' => 0, 'failed' => 0, 'dead_lettered' => 0, 'claimed' => 0];

    /** @var array<string, callable(Event): void> */
    private array $handlers = [];
    /** @var (callable(Event): void)|null */
    private $fallback = null;
    private bool $stopping = false;
    /** @var array<string, string> the last failure of each entry still pending, for its dead-letter reason */
    private array $lastError = [];

    /**
     * The Redis client must not prefix keys nor serialize values (phpredis
     * options), and its read timeout must outlast a blocking read.
     */
    public function __construct(
        private readonly \Redis $redis,
        private readonly Inbox $inbox,
        public readonly ConsumerConfig $config,
        private readonly ?LoggerInterface $logger = null,
    ) {
        $prefix = $redis->getOption(\Redis::OPT_PREFIX);
        if (is_string($prefix) && $prefix !== '') {
            throw new \InvalidArgumentException("the Redis client prefixes every key with \"$prefix\", so the consumer would read {$prefix}{$config->stream}; "
                . "give it a connection without a prefix (Laravel: 'options' => ['prefix' => ''] on the connection)");
        }
        if ($redis->getOption(\Redis::OPT_SERIALIZER) !== \Redis::SERIALIZER_NONE) {
            throw new \InvalidArgumentException('the Redis client unserializes the values it reads, and the relay writes plain strings; '
                . "give the consumer a connection with serializer Redis::SERIALIZER_NONE (Laravel: no 'serializer' option)");
        }
        $timeout = (float) $redis->getOption(\Redis::OPT_READ_TIMEOUT);
        if ($timeout > 0 && $timeout * 1000 <= $config->blockMs) {
            throw new \InvalidArgumentException("the Redis client's read timeout ({$timeout}s) ends a read that blocks for {$config->blockMs} ms; "
                . 'set read_timeout above ' . ($config->blockMs / 1000 + 1) . 's (or -1) on the connection, or lower blockMs');
        }
    }

    /**
     * on sets the handler of one event type. A handler writes through the
     * inbox's database connection, so its writes commit with the inbox row;
     * it throws to fail the delivery (the entry is retried after minIdleMs).
     *
     * @param callable(Event): void $handler
     */
    public function on(string $eventType, callable $handler): self
    {
        $this->handlers[$eventType] = $handler;
        return $this;
    }

    /**
     * onAny sets the handler of the event types without their own. Without
     * it, such events are acknowledged unprocessed (counted as skipped), so
     * that a new event type does not block the group.
     *
     * @param callable(Event): void $handler
     */
    public function onAny(callable $handler): self
    {
        $this->fallback = $handler;
        return $this;
    }

    /**
     * ensureGroup creates the group at the start of the stream (and the
     * stream, if the relay has not appended to it yet); an existing group
     * keeps its position, which is the group's progress.
     */
    public function ensureGroup(): void
    {
        try {
            $ok = $this->redis->xGroup('CREATE', $this->config->stream, $this->config->group, '0', true);
            $err = $ok === false ? (string) $this->redis->getLastError() : '';
        } catch (\RedisException $e) {
            $err = $e->getMessage();
        }
        // BUSYGROUP is Redis's error code for "the group exists": by protocol
        // the code is the first word of an error reply.
        if ($err !== '' && !str_starts_with($err, 'BUSYGROUP')) {
            throw new \RuntimeException("XGROUP CREATE {$this->config->stream} {$this->config->group}: $err");
        }
        $this->redis->clearLastError();
    }

    /** run processes entries until stop() or SIGTERM/SIGINT, then returns after the entry in progress. */
    public function run(): void
    {
        $this->loop(false);
    }

    /**
     * drain processes entries until none is new and none is pending (failing
     * ones included, until they are dead-lettered), or until a stop.
     */
    public function drain(): void
    {
        $this->loop(true);
    }

    /** stop makes run() and drain() return after the entry in progress; safe in a signal handler. */
    public function stop(): void
    {
        if (!$this->stopping) {
            $this->stopping = true;
            $this->log('info', 'stopping after the entry in progress');
        }
    }

    /**
     * step claims the entries pending longer than minIdleMs, then reads new
     * ones (waiting up to $blockMs), and processes them. It returns how many
     * entries it was given.
     */
    public function step(int $blockMs): int
    {
        $claimed = $this->claim();
        $this->stats['claimed'] += count($claimed);
        $given = count($claimed);
        if (!$this->deliverAll($claimed, true) || $this->stopping) {
            return $given;
        }
        $res = $this->redis->xReadGroup($this->config->group, $this->config->consumer, [$this->config->stream => '>'], $this->config->count, $blockMs);
        if ($res === false) {
            throw new \RuntimeException("XREADGROUP {$this->config->stream} {$this->config->group}: " . ($this->redis->getLastError() ?? 'no reply')
                . ' (a NOGROUP error means the group was deleted: ensureGroup() creates it)');
        }
        $read = $res[$this->config->stream] ?? [];
        $this->deliverAll($read, false);
        return $given + count($read);
    }

    /** summary is the stats as one line, processed=3 duplicates=0 ..., for logs and the tests. */
    public function summary(): string
    {
        return implode(' ', array_map(fn ($k, $v) => "$k=$v", array_keys($this->stats), $this->stats));
    }

    /** pending returns how many entries the group read and did not acknowledge. */
    public function pending(): int
    {
        $summary = $this->redis->xPending($this->config->stream, $this->config->group);
        return (int) ($summary[0] ?? 0);
    }

    private function loop(bool $drain): void
    {
        $restore = $this->stopOnSignals();
        try {
            $this->ensureGroup();
            while (!$this->stopping) {
                $given = $this->step($drain ? min(200, $this->config->blockMs) : $this->config->blockMs);
                if ($drain && $given === 0 && $this->pending() === 0) {
                    return;
                }
            }
        } finally {
            $restore();
        }
    }

    /**
     * deliverAll processes entries in order until a stop, and hands the rest
     * back to the group; it returns false when it stopped early.
     *
     * @param array<string, array<string, string>> $entries
     */
    private function deliverAll(array $entries, bool $claimed): bool
    {
        $ids = array_map('strval', array_keys($entries));
        foreach ($ids as $i => $id) {
            if ($this->stopping) {
                $this->handBack(array_slice($ids, $i));
                return false;
            }
            $this->deliver($id, $entries[$id], $claimed ? $this->deliveries($id) : 1);
        }
        return true;
    }

    /** @param array<string, string> $fields */
    private function deliver(string $id, array $fields, int $deliveries): void
    {
        $max = $this->config->maxDeliveries;
        if ($deliveries > $max) {
            // Its worker died (or was killed) at each delivery, or failed at the
            // earlier ones before max was lowered: no verdict of a handler now.
            $last = isset($this->lastError[$id]) ? "; last error: {$this->lastError[$id]}" : '';
            $this->deadLetter($id, $fields, $deliveries, "delivered $deliveries times and never acknowledged (max deliveries $max)$last");
            return;
        }
        $handler = $this->handlers[$fields['event_type'] ?? ''] ?? $this->fallback;
        if ($handler === null) {
            $this->stats['skipped']++;
            $this->ack($id);
            return;
        }
        try {
            $event = Event::fromEntry($this->config->stream, $id, $fields, $deliveries);
            $fresh = $this->inbox->process($event, $this->config->group, $this->config->consumer, $handler);
        } catch (\UnexpectedValueException|HandlerFailed $e) {
            $this->failed($id, $fields, $deliveries, $e);
            return;
        }
        // Anything else the inbox threw (the database is gone) ends the worker:
        // counting it against the entry would dead-letter good events in an outage.
        if ($fresh) {
            $this->stats['processed']++;
        } else {
            $this->stats['duplicates']++;
            $this->log('info', "duplicate delivery of {$event->messageId} ($id) acknowledged and skipped");
        }
        // After COMMIT: a crash before this XACK redelivers the entry, and the
        // inbox turns the redelivery into a duplicate.
        $this->ack($id);
    }

    /** @param array<string, string> $fields */
    private function failed(string $id, array $fields, int $deliveries, \Throwable $e): void
    {
        $this->stats['failed']++;
        $max = $this->config->maxDeliveries;
        if ($deliveries >= $max) {
            $this->deadLetter($id, $fields, $deliveries, "processing failed $deliveries times (max deliveries $max): {$e->getMessage()}");
            return;
        }
        $this->lastError[$id] = $e->getMessage();
        $this->log('warning', "processing $id failed (delivery $deliveries of $max); it stays pending and is retried after {$this->config->minIdleMs} ms: {$e->getMessage()}");
    }

    private function ack(string $id): void
    {
        unset($this->lastError[$id]);
        $n = $this->redis->xAck($this->config->stream, $this->config->group, [$id]);
        if ($n === false) {
            throw new \RuntimeException("XACK {$this->config->stream} {$this->config->group} $id: " . ($this->redis->getLastError() ?? 'no reply'));
        }
        if ($n === 0) {
            $this->log('warning', "entry $id was no longer pending when processed: another worker claimed it meanwhile; "
                . "make minIdleMs ({$this->config->minIdleMs}) longer than the slowest handler");
        }
    }

    /**
     * claim runs XAUTOCLAIM. phpredis has xAutoClaim() from version 6 on;
     * rawCommand works with every version.
     *
     * @return array<string, array<string, string>>
     */
    private function claim(): array
    {
        $reply = $this->redis->rawCommand('XAUTOCLAIM', $this->config->stream, $this->config->group, $this->config->consumer,
            (string) $this->config->minIdleMs, '0-0', 'COUNT', (string) $this->config->count);
        if (!is_array($reply)) {
            throw new \RuntimeException("XAUTOCLAIM {$this->config->stream} {$this->config->group}: " . ($this->redis->getLastError() ?? 'no reply'));
        }
        $out = [];
        foreach ($reply[1] ?? [] as [$id, $flat]) {
            if (!is_array($flat)) {
                continue; // deleted from the stream meanwhile (Redis 6.2 lists these)
            }
            $fields = [];
            for ($i = 0; $i + 1 < count($flat); $i += 2) {
                $fields[$flat[$i]] = $flat[$i + 1];
            }
            $out[(string) $id] = $fields;
        }
        return $out;
    }

    /** deliveries is the entry's delivery count, this delivery included. */
    private function deliveries(string $id): int
    {
        $p = $this->redis->xPending($this->config->stream, $this->config->group, $id, $id, 1);
        return (int) ($p[0][3] ?? 1);
    }

    /**
     * handBack marks entries this worker read and will not process as idle
     * for minIdleMs, so that the next XAUTOCLAIM of any worker of the group
     * takes them at once instead of after minIdleMs. JUSTID keeps their
     * delivery counts.
     *
     * @param list<string> $ids
     */
    private function handBack(array $ids): void
    {
        $this->redis->rawCommand('XCLAIM', $this->config->stream, $this->config->group, $this->config->consumer, '0', ...$ids,
            ...['IDLE', (string) $this->config->minIdleMs, 'JUSTID']);
        $this->log('info', count($ids) . ' entries read and not processed handed back to the group');
    }

    /**
     * deadLetter copies the entry with the reason and acknowledges it,
     * atomically (MULTI/EXEC): never both kept and lost, never lost.
     *
     * @param array<string, string> $fields
     */
    private function deadLetter(string $id, array $fields, int $deliveries, string $reason): void
    {
        unset($this->lastError[$id]);
        $fields['reason'] = $reason;
        $fields['source_stream'] = $this->config->stream;
        $fields['source_entry_id'] = $id;
        $fields['consumer_group'] = $this->config->group;
        $fields['deliveries'] = (string) $deliveries;
        $res = $this->redis->multi()
            ->xAdd($this->config->deadLetterStream, '*', $fields)
            ->xAck($this->config->stream, $this->config->group, [$id])
            ->exec();
        if (!is_array($res) || in_array(false, $res, true)) {
            throw new \RuntimeException("dead-lettering $id to {$this->config->deadLetterStream}: " . ($this->redis->getLastError() ?? 'MULTI/EXEC failed'));
        }
        $this->stats['dead_lettered']++;
        $this->log('error', "entry $id dead-lettered to {$this->config->deadLetterStream}: $reason");
    }

    /**
     * stopOnSignals makes SIGTERM and SIGINT call stop() while the loop runs,
     * and returns what puts the previous handlers back.
     */
    private function stopOnSignals(): \Closure
    {
        if (!function_exists('pcntl_signal')) {
            $this->log('warning', 'the pcntl extension is missing: SIGTERM and SIGINT end the worker at once instead of after the entry in progress '
                . '(the inbox still keeps processing exactly once); enable pcntl for a clean stop');
            return static function (): void {
            };
        }
        $async = pcntl_async_signals(true);
        $previous = [];
        foreach ([SIGTERM, SIGINT] as $signal) {
            $previous[$signal] = pcntl_signal_get_handler($signal);
            pcntl_signal($signal, function (): void {
                $this->stop();
            });
        }
        return static function () use ($previous, $async): void {
            foreach ($previous as $signal => $handler) {
                pcntl_signal($signal, $handler);
            }
            pcntl_async_signals($async);
        };
    }

    /** @param array<string, mixed> $context */
    private function log(string $level, string $message, array $context = []): void
    {
        if ($this->logger !== null) {
            $this->logger->log($level, $message, $context + ['stream' => $this->config->stream, 'group' => $this->config->group, 'consumer' => $this->config->consumer]);
            return;
        }
        fwrite(STDERR, "$level: $message\n");
    }
}
