<?php

namespace App\Providers;

use App\Outbox\DatabaseInbox;
use BinlogOutbox\Inbox;
use Illuminate\Database\DatabaseManager;
use Illuminate\Support\ServiceProvider;

/**
 * OutboxServiceProvider makes the consumer's inbox the table
 * processed_messages on the connection the handlers write with, so that an
 * event's effects and its inbox row commit in one transaction.
 */
class OutboxServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->app->singleton(Inbox::class, function ($app) {
            $config = $app['config']['outbox'];
            return new DatabaseInbox($app->make(DatabaseManager::class)->connection($config['db_connection']), $config['inbox_table']);
        });
    }
}
