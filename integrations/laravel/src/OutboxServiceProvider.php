<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use BinlogOutbox\Laravel\Queue\OutboxConnector;
use Illuminate\Queue\QueueManager;
use Illuminate\Support\ServiceProvider;

/**
 * OutboxServiceProvider, auto-discovered through composer.json, binds the
 * Outbox facade's recorder to the configured connection and table, and
 * brings the outbox table's migration (run it with `artisan migrate`, or
 * publish it and set outbox.migrations to false), and adds the queue driver
 * "outbox" (`php artisan queue:work outbox --queue=outbox:order`).
 */
class OutboxServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->mergeConfigFrom(__DIR__ . '/../config/outbox.php', 'outbox');
        $this->app->singleton(OutboxRecorder::class, function ($app) {
            $config = $app['config'];
            return new OutboxRecorder($app['db'], $config->get('outbox.connection'), $config->get('outbox.table', 'outbox'));
        });
        $this->callAfterResolving('queue', function (QueueManager $queue, $app) {
            $queue->addConnector('outbox', fn () => new OutboxConnector($app['redis'], $app['db']));
        });
    }

    public function boot(): void
    {
        if (!$this->app->runningInConsole()) {
            return;
        }
        $this->publishes([__DIR__ . '/../config/outbox.php' => $this->app->configPath('outbox.php')], 'outbox-config');
        $this->publishes([__DIR__ . '/../database/migrations' => $this->app->databasePath('migrations')], 'outbox-migrations');
        if ($this->app['config']->get('outbox.migrations', true)) {
            $this->loadMigrationsFrom(__DIR__ . '/../database/migrations');
        }
    }
}
