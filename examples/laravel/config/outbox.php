<?php

use App\Outbox\OrderHandlers;
use BinlogOutbox\ConsumerConfig;

// What `php artisan outbox:consume` reads and who handles each event type;
// the command's options override the values.
return [
    // The connection of config/database.php's redis section: no prefix, no serializer.
    'redis_connection' => env('OUTBOX_REDIS_CONNECTION', 'outbox'),
    // The database connection of the inbox: the one the handlers write with.
    'db_connection' => env('OUTBOX_DB_CONNECTION'),
    'inbox_table' => 'processed_messages',

    'stream' => env('OUTBOX_STREAM', 'outbox:order'),
    'group' => env('OUTBOX_GROUP', 'billing'),
    'dead_letter_stream' => env('OUTBOX_DEAD_LETTER_STREAM', 'outbox:dead-letter'),
    'max_deliveries' => (int) env('OUTBOX_MAX_DELIVERIES', ConsumerConfig::DEFAULT_MAX_DELIVERIES),
    // Longer than the slowest handler, or a slow entry is processed twice.
    'min_idle_ms' => (int) env('OUTBOX_MIN_IDLE_MS', ConsumerConfig::DEFAULT_MIN_IDLE_MS),

    // event_type => [class, method]; the class comes from the container, the
    // method takes a BinlogOutbox\Event and runs in the inbox's transaction.
    // Event types without a handler are acknowledged unprocessed.
    'handlers' => [
        'order.placed' => [OrderHandlers::class, 'placed'],
        'order.paid' => [OrderHandlers::class, 'paid'],
    ],
];
