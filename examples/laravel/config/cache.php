<?php

// queue:work reads queue:restart's signal from the cache; a real application
// uses a shared store (redis, database) so that every worker sees it.
return [
    'default' => env('CACHE_DRIVER', 'array'),
    'stores' => [
        'array' => ['driver' => 'array', 'serialize' => false],
    ],
    'prefix' => 'outbox_example_cache',
];
