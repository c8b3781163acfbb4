<?php

namespace App\Console\Commands;

use Illuminate\Console\Command;
use Illuminate\Database\QueryException;
use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Redis;

/**
 * ConsumeOutbox reads a stream binlog-outbox appends to, with a consumer
 * group, and processes each event exactly once: the processing and the inbox
 * row (processed_messages, primary key consumer_group + message_id) commit
 * together, a redelivery is acknowledged and skipped, XACK follows COMMIT.
 * examples/php/consumer.php is the same loop without Laravel, with
 * XAUTOCLAIM of crashed consumers' entries and dead-lettering; it is the one
 * the test suite runs.
 *
 *   php artisan outbox:consume outbox:order --group=billing
 *
 * Uses the phpredis client (REDIS_CLIENT=phpredis). Run one process per
 * consumer name (e.g. under Supervisor), with --consumer stable per process.
 */
class ConsumeOutbox extends Command
{
    protected $signature = 'outbox:consume {stream=outbox:order} {--group=billing} {--consumer=} {--count=100} {--block=2000}';

    protected $description = 'Process outbox events from a Redis stream exactly once';

    public function handle(): int
    {
        $stream = $this->argument('stream');
        $group = $this->option('group');
        $consumer = $this->option('consumer') ?: gethostname() . '-' . getmypid();
        $redis = Redis::connection()->client(); // the \Redis instance

        try {
            $redis->xGroup('CREATE', $stream, $group, '0', true);
        } catch (\RedisException $e) {
            if (!str_starts_with($e->getMessage(), 'BUSYGROUP')) { // the group exists: fine
                throw $e;
            }
        }

        $running = true;
        $this->trap([SIGTERM, SIGINT], function () use (&$running) { $running = false; });

        while ($running) {
            $res = $redis->xReadGroup($group, $consumer, [$stream => '>'], (int) $this->option('count'), (int) $this->option('block'));
            foreach ($res ?: [] as $entries) {
                foreach ($entries as $id => $fields) {
                    try {
                        $this->process($group, $consumer, $stream, (string) $id, $fields);
                    } catch (\Throwable $e) {
                        // Not acknowledged: stays pending; claim it later with
                        // XAUTOCLAIM and dead-letter it after N deliveries, as
                        // examples/php/consumer.php does.
                        report($e);
                        continue;
                    }
                    $redis->xAck($stream, $group, [$id]); // after COMMIT, never before
                }
            }
        }

        return self::SUCCESS;
    }

    private function process(string $group, string $consumer, string $stream, string $id, array $fields): void
    {
        try {
            DB::transaction(function () use ($group, $consumer, $stream, $id, $fields) {
                DB::table('processed_messages')->insert([
                    'consumer_group' => $group,
                    'message_id' => $fields['message_id'],
                    'stream' => $stream,
                    'entry_id' => $id,
                    'event_type' => $fields['event_type'],
                    'aggregate_id' => $fields['aggregate_id'],
                    'consumer' => $consumer,
                ]);

                $payload = json_decode($fields['payload'], true, 512, JSON_THROW_ON_ERROR);
                match ($fields['event_type']) {
                    'order.placed' => $this->onOrderPlaced($payload),
                    default => null, // events this service does not care about are acknowledged
                };
            });
        } catch (QueryException $e) {
            if ((int) ($e->errorInfo[1] ?? 0) !== 1062) { // ER_DUP_ENTRY: a redelivery, skip it
                throw $e;
            }
        }
    }

    private function onOrderPlaced(array $payload): void
    {
        // Business logic, with DB:: calls that commit with the inbox row.
    }
}
