<?php

namespace App\Console\Commands;

use BinlogOutbox\ConsumerConfig;
use BinlogOutbox\Inbox;
use BinlogOutbox\OutboxConsumer;
use Illuminate\Console\Command;
use Illuminate\Support\Facades\Redis;

/**
 * ConsumeOutbox is a worker of one consumer group on a stream binlog-outbox
 * appends to: BinlogOutbox\OutboxConsumer with the handlers of
 * config/outbox.php and the inbox in the handlers' DB::transaction. It stops
 * after the entry in progress on SIGTERM or SIGINT.
 *
 *   php artisan outbox:consume --group=billing --consumer=billing-1
 *
 * Run one process per consumer name under Supervisor or systemd, with the
 * name stable across restarts (e.g. billing-%(process_num)s).
 */
class ConsumeOutbox extends Command
{
    protected $signature = 'outbox:consume
        {stream? : the stream (config outbox.stream)}
        {--group= : the consumer group (config outbox.group)}
        {--consumer= : this worker\'s name in the group, stable across restarts (default: hostname-pid)}
        {--max-deliveries= : deliveries after which a failing entry is dead-lettered (config outbox.max_deliveries)}
        {--min-idle-ms= : pending this long, an entry is taken over by any worker (config outbox.min_idle_ms)}
        {--count=100 : entries per read}
        {--block-ms=2000 : how long a read waits for new entries}
        {--drain : exit once nothing is new and nothing is pending}';

    protected $description = 'Process the events of a binlog-outbox stream exactly once';

    public function handle(Inbox $inbox): int
    {
        $config = config('outbox');
        $consumer = new OutboxConsumer(
            Redis::connection($config['redis_connection'])->client(),
            $inbox,
            new ConsumerConfig(
                stream: $this->argument('stream') ?? $config['stream'],
                group: $this->option('group') ?? $config['group'],
                consumer: (string) $this->option('consumer'),
                deadLetterStream: $config['dead_letter_stream'],
                maxDeliveries: (int) ($this->option('max-deliveries') ?? $config['max_deliveries']),
                minIdleMs: (int) ($this->option('min-idle-ms') ?? $config['min_idle_ms']),
                count: (int) $this->option('count'),
                blockMs: (int) $this->option('block-ms'),
            ),
            $this->laravel->make('log'),
        );
        foreach ($config['handlers'] as $eventType => [$class, $method]) {
            $consumer->on($eventType, [$this->laravel->make($class), $method]);
        }

        try {
            $this->option('drain') ? $consumer->drain() : $consumer->run();
        } finally {
            $this->line($consumer->summary());
        }
        return self::SUCCESS;
    }
}
