<?php

declare(strict_types=1);

namespace BinlogOutbox;

/**
 * ConsumerConfig says which stream an OutboxConsumer reads, as whom, and when
 * it gives up on an entry. The constructor rejects values that cannot work,
 * naming the field and how to fix it.
 */
final class ConsumerConfig
{
    /** DEFAULT_MAX_DELIVERIES: a poison entry costs a few retries, a flaky one gets them. */
    public const DEFAULT_MAX_DELIVERIES = 5;
    /** DEFAULT_MIN_IDLE_MS: longer than the slowest handler, or slow entries are processed twice. */
    public const DEFAULT_MIN_IDLE_MS = 30000;

    /** consumer is the name in the group: stable per worker across restarts, unique among the group's workers. */
    public readonly string $consumer;

    /**
     * @param string $stream the stream binlog-outbox appends to (`outbox:{aggregate_type}` by default)
     * @param string $group one per service; each group gets every event
     * @param string $consumer '' for hostname-pid, which is unique but not stable: a restarted worker
     *                         then leaves its pending entries to XAUTOCLAIM after $minIdleMs
     * @param string $deadLetterStream where entries go after $maxDeliveries; the relay uses the same stream
     * @param int $maxDeliveries deliveries after which a failing entry is dead-lettered
     * @param int $minIdleMs how long an entry stays pending before any worker takes it over
     *                       (from a crashed worker, or after a failure); longer than the slowest handler
     * @param int $count entries per read
     * @param int $blockMs how long a read waits for new entries; an idle worker notices a stop this late
     */
    public function __construct(
        public readonly string $stream = 'outbox:order',
        public readonly string $group = 'billing',
        string $consumer = '',
        public readonly string $deadLetterStream = 'outbox:dead-letter',
        public readonly int $maxDeliveries = self::DEFAULT_MAX_DELIVERIES,
        public readonly int $minIdleMs = self::DEFAULT_MIN_IDLE_MS,
        public readonly int $count = 100,
        public readonly int $blockMs = 2000,
    ) {
        $this->consumer = $consumer !== '' ? $consumer : gethostname() . '-' . getmypid();
        $problems = [];
        foreach (['stream' => $stream, 'group' => $group, 'deadLetterStream' => $deadLetterStream] as $field => $value) {
            if ($value === '') {
                $problems[] = "$field is empty; name the Redis key";
            }
        }
        if ($deadLetterStream === $stream) {
            $problems[] = "deadLetterStream is the stream itself ($stream); dead letters would be delivered again";
        }
        if ($maxDeliveries < 1) {
            $problems[] = "maxDeliveries is $maxDeliveries; give 1 or more";
        }
        if ($minIdleMs < 1) {
            $problems[] = "minIdleMs is $minIdleMs; give the milliseconds after which a pending entry is taken over, longer than the slowest handler";
        }
        if ($count < 1) {
            $problems[] = "count is $count; give 1 or more";
        }
        if ($blockMs < 1) {
            $problems[] = "blockMs is $blockMs; give 1 or more (0 would block for ever and never see a stop)";
        }
        if ($problems !== []) {
            throw new \InvalidArgumentException('binlog-outbox consumer config: ' . implode('; ', $problems));
        }
    }
}
