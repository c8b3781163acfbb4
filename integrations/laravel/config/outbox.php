<?php

// What binlog-outbox/laravel records events with. Publish it with
// `php artisan vendor:publish --tag=outbox-config`.
return [
    // The database connection of the outbox table: the one the state changes
    // are written with, so that the event commits with them (null: the default).
    'connection' => env('OUTBOX_CONNECTION'),

    // The table the relay reads (binlog-outbox run --table).
    'table' => env('OUTBOX_TABLE', 'outbox'),

    // false when the application publishes the migration
    // (`php artisan vendor:publish --tag=outbox-migrations`) or creates the
    // table otherwise.
    'migrations' => true,
];
