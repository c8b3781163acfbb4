<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

use Illuminate\Contracts\Redis\Factory as Redis;
use Illuminate\Database\ConnectionResolverInterface;
use Illuminate\Queue\Connectors\ConnectorInterface;

/**
 * OutboxConnector makes the queue of config/queue.php's connections with
 * driver "outbox": the relay's Redis streams, read through a consumer group.
 */
class OutboxConnector implements ConnectorInterface
{
    public function __construct(private Redis $redis, private ConnectionResolverInterface $db)
    {
    }

    public function connect(array $config)
    {
        return new OutboxQueue(
            $this->redis->connection($config['connection'] ?? 'outbox')->client(),
            $this->db->connection($config['db_connection'] ?? null),
            new QueueOptions($config),
        );
    }
}
