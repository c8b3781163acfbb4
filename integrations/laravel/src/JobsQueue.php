<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

/**
 * JobsQueue gives the connections of config/queue.php that make Laravel's
 * jobs table the outbox (binlog-outbox run --source laravel-jobs):
 *
 *     'database' => \BinlogOutbox\Laravel\JobsQueue::connection(),
 *
 * and, when the relay writes streams (--format laravel-stream), the
 * connection their workers read:
 *
 *     'outbox-jobs' => \BinlogOutbox\Laravel\JobsQueue::streams(),
 */
final class JobsQueue
{
    /**
     * connection is the database queue on the application's own database
     * connection, so that a job dispatched inside DB::transaction is a row
     * that commits or rolls back with the transaction. after_commit stays
     * false: true would insert the row after the COMMIT, outside the
     * transaction, and a process that dies in between loses the job.
     *
     * @param array<string, mixed> $overrides e.g. ['table' => 'queued_jobs']
     * @return array<string, mixed>
     */
    public static function connection(array $overrides = []): array
    {
        return array_merge([
            'driver' => 'database',
            'connection' => null,
            'table' => 'jobs',
            'queue' => 'default',
            'retry_after' => 90,
        ], $overrides, ['after_commit' => false]);
    }

    /**
     * streams is the outbox connector on the relay's streams of jobs, one
     * per queue (outbox:jobs:<queue>): `php artisan queue:work outbox-jobs
     * --queue=default,emails`.
     *
     * @param array<string, mixed> $overrides e.g. ['group' => 'mailers', 'retry_after' => 300]
     * @return array<string, mixed>
     */
    public static function streams(array $overrides = []): array
    {
        return array_merge([
            'driver' => 'outbox',
            'connection' => 'outbox',
            'stream_prefix' => 'outbox:jobs:',
            'queue' => 'default',
            'group' => 'laravel-jobs',
            'consumer' => gethostname() . '-' . getmypid(),
            'retry_after' => 90,
            'block_for' => 1,
            'dead_letter_stream' => 'outbox:dead-letter',
        ], $overrides);
    }
}
