<?php

// The least configuration that lets Laravel's console discover packages and
// publish their files: the package's provider is not listed here, so only
// discovery through vendor/composer/installed.json can register it.
return [
    'name' => 'shop',
    'env' => 'testing',
    'debug' => true,
    'key' => 'base64:' . base64_encode(str_repeat('k', 32)),
    'cipher' => 'AES-256-CBC',
    'providers' => [
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Illuminate\Redis\RedisServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
    ],
    'aliases' => [],
];
