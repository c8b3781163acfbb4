<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job;

/**
 * LaravelJob is a job of the application's database queue as the relay
 * delivered it to a stream (--source laravel-jobs --format laravel-stream):
 * the entry's job field is the payload Laravel wrote, which the worker runs
 * as it runs any queued job. Its attempts are the entry's deliveries, delete
 * acknowledges it (XACK), release leaves it pending to be claimed again
 * after the backoff, and a job that fails for good goes to failed_jobs as
 * on any Laravel queue (queue:retry appends it to its stream again).
 */
class LaravelJob extends Job implements JobContract
{
    /** @param array<string, string> $fields */
    public function __construct(
        Container $container,
        private OutboxQueue $outbox,
        string $queue,
        private string $stream,
        private string $id,
        private array $fields,
        private int $deliveries,
        ?string $connectionName,
    ) {
        $this->container = $container;
        // The queue's name, which failed_jobs records and queue:retry
        // pushes to; the stream is the prefix's.
        $this->queue = $queue;
        $this->connectionName = $connectionName;
    }

    public function getJobId()
    {
        return $this->id;
    }

    public function getRawBody()
    {
        return $this->fields['job'];
    }

    public function attempts()
    {
        return $this->deliveries;
    }

    public function delete()
    {
        parent::delete();
        $this->outbox->ack($this->stream, $this->id);
    }

    public function release($delay = 0)
    {
        parent::release($delay);
        $this->outbox->releaseAfter($this->stream, $this->id, (int) $delay);
    }
}
