<?php

return [
    'name' => env('APP_NAME', 'outbox-example'),
    'env' => env('APP_ENV', 'production'),
    'debug' => (bool) env('APP_DEBUG', false),
    'url' => env('APP_URL', 'http://localhost'),
    // The outbox's occurred_at is UTC, and so is every time the app writes.
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',

    // What a console application with a database and Redis needs; a full
    // application keeps its own list (Laravel 10+:
    // ServiceProvider::defaultProviders()->merge([...])).
    'providers' => [
        // The maintenance mode queue:work asks about (Laravel 9 and later
        // bind it here).
        Illuminate\Foundation\Providers\FoundationServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        // migrate, queue:work, queue:retry and the other commands.
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        // Bus::chain and Bus::batch (jobs:dispatch).
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Redis\RedisServiceProvider::class,
        // binlog-outbox/laravel's; Composer's package discovery adds it in an
        // installed application, Debian's autoloader does not.
        BinlogOutbox\Laravel\OutboxServiceProvider::class,
    ],

    'aliases' => [],
];
