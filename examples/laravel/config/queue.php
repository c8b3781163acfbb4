<?php

use App\Jobs\BillOrder;

// `php artisan queue:work outbox --queue=outbox:order`: the package's
// "outbox" driver reads the relay's streams through a consumer group.
return [
    'default' => env('QUEUE_CONNECTION', 'outbox'),

    'connections' => [
        'outbox' => [
            'driver' => 'outbox',
            // config/database.php's redis connection without a key prefix.
            'connection' => env('OUTBOX_REDIS_CONNECTION', 'outbox'),
            'queue' => env('OUTBOX_STREAM', 'outbox:order'),
            'group' => env('OUTBOX_QUEUE_GROUP', 'billing-queue'),
            // Unique in the group and stable across restarts.
            'consumer' => env('OUTBOX_CONSUMER', gethostname() . '-' . getmypid()),
            // Seconds an attempt may take before the entry is claimed again:
            // longer than the slowest job, and more than --timeout.
            'retry_after' => (int) env('OUTBOX_RETRY_AFTER', 90),
            'block_for' => 1,
            'dead_letter_stream' => env('OUTBOX_DEAD_LETTER_STREAM', 'outbox:dead-letter'),
            // The inbox on the connection the jobs write with (null: the default).
            'db_connection' => env('OUTBOX_DB_CONNECTION'),
            'inbox_table' => 'processed_messages',
            // event_type => a class with handle(OutboxMessage $event, int $attempt);
            // event types without one are acknowledged unprocessed.
            'jobs' => [
                'order.placed' => BillOrder::class,
                'order.paid' => BillOrder::class,
            ],
        ],

        // The database queue on the application's connection: a job
        // dispatched here inside DB::transaction is a row of jobs that
        // commits or rolls back with the transaction, and the relay
        // (--source laravel-jobs) delivers it to the redis connection below
        // or, with --format laravel-stream, to outbox-jobs. No worker may
        // run on this connection (docs/laravel.md, "Your jobs, exactly once").
        'database' => BinlogOutbox\Laravel\JobsQueue::connection(),

        // Laravel's Redis queue, where the relay pushes the jobs:
        // `php artisan queue:work redis` (or Horizon) runs them.
        'redis' => [
            'driver' => 'redis',
            'connection' => 'default',
            'queue' => 'default',
            'retry_after' => 90,
            'block_for' => 1,
        ],

        // The relay's streams of jobs (--format laravel-stream), one per
        // queue: `php artisan queue:work outbox-jobs --queue=default,emails`.
        'outbox-jobs' => BinlogOutbox\Laravel\JobsQueue::streams([
            'connection' => env('OUTBOX_REDIS_CONNECTION', 'outbox'),
            'consumer' => env('OUTBOX_CONSUMER', gethostname() . '-' . getmypid()),
            'retry_after' => (int) env('OUTBOX_RETRY_AFTER', 90),
        ]),
    ],

    // Bus::batch's table, on the application's connection.
    'batching' => [
        'database' => env('DB_CONNECTION', 'mysql'),
        'table' => 'job_batches',
    ],

    // queue:failed, queue:retry.
    'failed' => [
        'driver' => 'database-uuids',
        'database' => env('DB_CONNECTION', 'mysql'),
        'table' => 'failed_jobs',
    ],
];
