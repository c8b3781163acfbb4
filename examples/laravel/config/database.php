<?php

return [
    'default' => env('DB_CONNECTION', 'mysql'),

    'connections' => [
        'mysql' => [
            'driver' => 'mysql',
            'host' => env('DB_HOST', '127.0.0.1'),
            'port' => env('DB_PORT', '3306'),
            'database' => env('DB_DATABASE', 'app'),
            'username' => env('DB_USERNAME', 'app'),
            'password' => env('DB_PASSWORD', ''),
            'unix_socket' => env('DB_SOCKET', ''),
            'charset' => 'utf8mb4',
            'collation' => 'utf8mb4_unicode_ci',
            'prefix' => '',
            'strict' => true,
            'engine' => null,
            // The session's time zone: CURRENT_TIMESTAMP defaults (occurred_at)
            // are UTC, as the relay reads them.
            'timezone' => '+00:00',
        ],
    ],

    'migrations' => 'migrations',

    'redis' => [
        'client' => env('REDIS_CLIENT', 'phpredis'),

        'options' => [
            'prefix' => env('REDIS_PREFIX', 'outbox_example_'),
        ],

        'default' => [
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'password' => env('REDIS_PASSWORD'),
            'port' => env('REDIS_PORT', '6379'),
            'database' => env('REDIS_DB', '0'),
        ],

        // The connection the outbox consumer reads the relay's streams with:
        // no key prefix (the relay writes outbox:order, not
        // laravel_database_outbox:order), no serializer (the fields are plain
        // strings), and a read timeout longer than a blocking read.
        'outbox' => [
            'host' => env('OUTBOX_REDIS_HOST', env('REDIS_HOST', '127.0.0.1')),
            'password' => env('OUTBOX_REDIS_PASSWORD', env('REDIS_PASSWORD')),
            'port' => env('OUTBOX_REDIS_PORT', env('REDIS_PORT', '6379')),
            'database' => env('OUTBOX_REDIS_DB', env('REDIS_DB', '0')),
            'read_timeout' => 60,
            'options' => ['prefix' => ''],
        ],
    ],
];
