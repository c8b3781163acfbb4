<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job;

/**
 * OutboxJob is one stream entry as Laravel's worker runs it: its attempts
 * are the entry's deliveries, delete acknowledges it (XACK), release leaves
 * it pending to be claimed again after the backoff, and a job that fails for
 * good is copied to the dead-letter stream before it is acknowledged (and
 * Laravel writes it to failed_jobs).
 */
class OutboxJob extends Job implements JobContract
{
    private string $raw;

    /** @param array<string, string> $fields */
    public function __construct(
        Container $container,
        private OutboxQueue $outbox,
        string $stream,
        private string $id,
        private array $fields,
        private int $deliveries,
        string $class,
        ?string $connectionName,
    ) {
        $this->container = $container;
        $this->queue = $stream;
        $this->connectionName = $connectionName;
        $defaults = get_class_vars($class);
        $this->raw = json_encode([
            'uuid' => $fields['message_id'] ?? $id,
            'displayName' => $class,
            'job' => HandleOutboxEvent::class . '@handle',
            'maxTries' => $defaults['tries'] ?? null,
            'backoff' => $defaults['backoff'] ?? null,
            'timeout' => $defaults['timeout'] ?? null,
            'data' => ['stream' => $stream, 'entry_id' => $id, 'class' => $class, 'entry' => $fields],
        ], JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
    }

    public function getJobId()
    {
        return $this->id;
    }

    public function getRawBody()
    {
        return $this->raw;
    }

    public function attempts()
    {
        return $this->deliveries;
    }

    public function delete()
    {
        parent::delete();
        $this->outbox->ack($this->queue, $this->id);
    }

    public function release($delay = 0)
    {
        parent::release($delay);
        $this->outbox->releaseAfter($this->queue, $this->id, (int) $delay);
    }

    public function fail($e = null)
    {
        if (!$this->isDeleted()) {
            // Before the XACK of parent::fail: an entry is never lost between the two.
            $this->outbox->deadLetter($this->queue, $this->id, $this->fields, $this->deliveries, $e ? get_class($e) . ': ' . $e->getMessage() : 'failed');
        }
        parent::fail($e);
    }

    public function outbox(): OutboxQueue
    {
        return $this->outbox;
    }
}
