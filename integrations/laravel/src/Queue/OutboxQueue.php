<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

use Illuminate\Contracts\Queue\Queue as QueueContract;
use Illuminate\Database\ConnectionInterface;
use Illuminate\Queue\Queue;
use LogicException;
use Redis;
use RedisException;

/**
 * OutboxQueue is a Laravel queue on the relay's Redis streams: pop reads an
 * entry through the consumer group (XAUTOCLAIM of entries pending longer
 * than retry_after first, so a failed or abandoned attempt comes back, then
 * XREADGROUP), and the job acknowledges it (XACK) once its handler's
 * transaction committed. The streams carry outbox events, and the jobs of
 * the application's database queue that the relay delivers with --format
 * laravel-stream (an entry with a job field: LaravelJob runs its payload;
 * a delayed one waits in <stream>:delayed until pop moves it to the stream).
 * pushRaw appends a failed job's entry again for queue:retry, push refuses:
 * dispatch on the database connection, in the transaction of the change.
 */
class OutboxQueue extends Queue implements QueueContract
{
    /** @var array<string, true> streams whose group exists */
    private array $groups = [];

    public function __construct(private Redis $redis, private ConnectionInterface $db, private QueueOptions $options)
    {
    }

    public function size($queue = null)
    {
        return (int) $this->redis->xLen($this->getQueue($queue));
    }

    /**
     * pendingSize is the number of entries the group has not been given yet
     * (Laravel 12's queue contract asks for it, as for the next three). It
     * counts the entries after the group's last delivered ID, at most
     * 10,000 (a monitor needs the order of magnitude; an exact count of a
     * long stream would cost Redis a scan each time).
     */
    public function pendingSize($queue = null)
    {
        return count($this->undelivered($this->getQueue($queue), 10000));
    }

    /** delayedSize is 0: an outbox queue has no delayed jobs (later refuses). */
    public function delayedSize($queue = null)
    {
        return 0;
    }

    /** reservedSize is the number of entries delivered to the group and not yet acknowledged. */
    public function reservedSize($queue = null)
    {
        $stream = $this->getQueue($queue);
        $this->ensureGroup($stream);
        $summary = $this->redis->rawCommand('XPENDING', $stream, $this->options->group);
        return (int) ($summary[0] ?? 0);
    }

    /**
     * creationTimeOfOldestPendingJob is the Unix time of the oldest entry
     * the group has not been given (its ID's milliseconds: when the relay
     * appended it), null when there is none.
     */
    public function creationTimeOfOldestPendingJob($queue = null)
    {
        $first = $this->undelivered($this->getQueue($queue), 1);
        if ($first === []) {
            return null;
        }
        return intdiv((int) explode('-', (string) $first[0])[0], 1000);
    }

    public function push($job, $data = '', $queue = null)
    {
        throw new LogicException('the outbox queue carries what the relay delivers: record events with Outbox::record, or dispatch jobs on the database connection, in the transaction of the change');
    }

    /**
     * pushRaw appends the entry of a job's payload (queue:retry of a failed
     * job) to its stream: an outbox event's entry as it was, or a Laravel
     * job as an entry with its payload in the job field.
     */
    public function pushRaw($payload, $queue = null, array $options = [])
    {
        $decoded = json_decode($payload, true, 512, JSON_THROW_ON_ERROR);
        if (!isset($decoded['data']['entry']) && isset($decoded['job'])) {
            return $this->redis->xAdd($this->getQueue($queue), '*', [
                'message_id' => (string) ($decoded['uuid'] ?? ''),
                'event_type' => (string) ($decoded['displayName'] ?? ''),
                'job' => $payload,
            ]);
        }
        $entry = $decoded['data']['entry'] ?? throw new LogicException('not an outbox job payload: no data.entry');
        return $this->redis->xAdd($this->getQueue($queue ?? $decoded['data']['stream'] ?? null), '*', $entry);
    }

    public function later($delay, $job, $data = '', $queue = null)
    {
        return $this->push($job, $data, $queue);
    }

    public function pop($queue = null)
    {
        $stream = $this->getQueue($queue);
        $this->ensureGroup($stream);
        $this->migrateDelayed($stream);
        // Entries without a job class are acknowledged unprocessed, so that a
        // new event type does not block the group; then read on.
        for ($i = 0; $i < 100; $i++) {
            $read = $this->claimIdle($stream) ?? $this->readNew($stream);
            if ($read === null) {
                return null;
            }
            [$id, $fields, $deliveries] = $read;
            if (isset($fields['job'])) {
                return new LaravelJob($this->container, $this, $queue ?: $this->options->stream, $stream, $id, $fields, $deliveries, $this->connectionName);
            }
            $class = $this->options->jobs[$fields['event_type'] ?? ''] ?? null;
            if ($class === null) {
                $this->ack($stream, $id);
                continue;
            }
            return new OutboxJob($this->container, $this, $stream, $id, $fields, $deliveries, $class, $this->connectionName);
        }
        return null;
    }

    /**
     * getQueue is the stream of a queue: with stream_prefix, the prefix and
     * the queue's name (the relay's stream per queue of the jobs table),
     * else the stream the name is.
     */
    public function getQueue(?string $queue): string
    {
        if ($this->options->streamPrefix !== null) {
            return $this->options->streamPrefix . ($queue ?: $this->options->stream);
        }
        return $queue ?: $this->options->stream;
    }

    /**
     * MIGRATE_DELAYED moves up to 100 due members of a stream's delayed set
     * (the relay's delayed jobs, scored by their available_at) to the
     * stream, each in the order of a flat entry's fields, and removes them
     * from the set in the same step: a job moves once, whichever worker
     * runs the script.
     */
    private const MIGRATE_DELAYED = <<<'LUA'
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, m in ipairs(due) do
  local f = cjson.decode(m)
  redis.call('XADD', KEYS[2], '*', 'message_id', f.message_id, 'aggregate_type', f.aggregate_type,
    'aggregate_id', f.aggregate_id, 'event_type', f.event_type, 'job', f.job,
    'occurred_at', f.occurred_at, 'outbox_id', f.outbox_id)
  redis.call('ZREM', KEYS[1], m)
end
return #due
LUA;

    /** migrateDelayed moves the delayed jobs that are due to the stream (stream_prefix only). */
    private function migrateDelayed(string $stream): void
    {
        if ($this->options->streamPrefix === null) {
            return;
        }
        $this->redis->eval(self::MIGRATE_DELAYED, [$stream . ':delayed', $stream, (string) time()], 2);
    }

    public function options(): QueueOptions
    {
        return $this->options;
    }

    public function database(): ConnectionInterface
    {
        return $this->db;
    }

    public function ack(string $stream, string $id): void
    {
        $this->redis->xAck($stream, $this->options->group, [$id]);
    }

    /**
     * releaseAfter makes the entry claimable in $delay seconds: its idle time
     * is set so that retry_after passes then (JUSTID leaves its delivery
     * count alone).
     */
    public function releaseAfter(string $stream, string $id, int $delay): void
    {
        $idle = max(0, ($this->options->retryAfter - $delay) * 1000);
        $this->redis->rawCommand('XCLAIM', $stream, $this->options->group, $this->options->consumer, '0', $id, 'IDLE', (string) $idle, 'JUSTID');
    }

    /** deadLetter copies a job's entry that failed for good to the dead-letter stream. */
    public function deadLetter(string $stream, string $id, array $fields, int $deliveries, string $reason): void
    {
        $this->redis->xAdd($this->options->deadLetterStream, '*', $fields + [
            'reason' => $reason,
            'source_stream' => $stream,
            'source_entry_id' => $id,
            'consumer_group' => $this->options->group,
            'deliveries' => (string) $deliveries,
        ]);
    }

    /** @return list<string> the IDs of up to $count entries after the group's last delivered one */
    private function undelivered(string $stream, int $count): array
    {
        $this->ensureGroup($stream);
        $last = '0-0';
        foreach ($this->redis->rawCommand('XINFO', 'GROUPS', $stream) ?: [] as $group) {
            $info = self::pairs($group);
            if (($info['name'] ?? null) === $this->options->group) {
                $last = (string) $info['last-delivered-id'];
            }
        }
        $entries = $this->redis->rawCommand('XRANGE', $stream, '(' . $last, '+', 'COUNT', (string) $count) ?: [];
        return array_map(static fn (array $entry): string => (string) $entry[0], $entries);
    }

    private function ensureGroup(string $stream): void
    {
        if (isset($this->groups[$stream])) {
            return;
        }
        try {
            $this->redis->rawCommand('XGROUP', 'CREATE', $stream, $this->options->group, '0', 'MKSTREAM');
        } catch (RedisException $e) {
            if (!str_contains($e->getMessage(), 'BUSYGROUP')) {
                throw $e;
            }
        }
        $this->groups[$stream] = true;
    }

    /** @return array{string, array<string, string>, int}|null */
    private function claimIdle(string $stream): ?array
    {
        $o = $this->options;
        $reply = $this->redis->rawCommand('XAUTOCLAIM', $stream, $o->group, $o->consumer, (string) ($o->retryAfter * 1000), '0-0', 'COUNT', '1');
        foreach ($reply[1] ?? [] as $entry) {
            if (!is_array($entry) || !is_array($entry[1] ?? null)) {
                continue; // trimmed away while pending (Redis 6.2)
            }
            $pending = $this->redis->rawCommand('XPENDING', $stream, $o->group, $entry[0], $entry[0], '1');
            return [$entry[0], self::pairs($entry[1]), (int) ($pending[0][3] ?? 1)];
        }
        return null;
    }

    /** @return array{string, array<string, string>, int}|null */
    private function readNew(string $stream): ?array
    {
        $o = $this->options;
        $reply = $this->redis->xReadGroup($o->group, $o->consumer, [$stream => '>'], 1, $o->blockFor * 1000);
        foreach ($reply[$stream] ?? [] as $id => $fields) {
            return [(string) $id, $fields, 1];
        }
        return null;
    }

    /** @return array<string, string> */
    private static function pairs(array $flat): array
    {
        $fields = [];
        for ($i = 0; $i + 1 < count($flat); $i += 2) {
            $fields[$flat[$i]] = $flat[$i + 1];
        }
        return $fields;
    }
}
