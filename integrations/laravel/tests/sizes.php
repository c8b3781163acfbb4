<?php
// sizes.php checks the queue's size methods against a real Redis (host,
// port and database are its arguments): size, and the four that Laravel 12's
// queue contract adds (pendingSize, delayedSize, reservedSize,
// creationTimeOfOldestPendingJob), before and after a worker's pop. It
// prints what it found as JSON for the Go test (TestLaravelQueue_Sizes).

declare(strict_types=1);

use BinlogOutbox\Laravel\Queue\OutboxQueue;
use BinlogOutbox\Laravel\Queue\QueueOptions;
use Illuminate\Container\Container;
use Illuminate\Database\MySqlConnection;

/** SizesJob is the job class of the entries; pop builds its job, nothing runs it. */
final class SizesJob
{
    public int $tries = 3;
}

[, $host, $port, $db] = $argv + [null, null, null, null];
$db ?? exit("usage: php sizes.php REDIS_HOST REDIS_PORT REDIS_DB\n");
require '/usr/share/php/Illuminate/autoload.php';
require __DIR__ . '/../autoload.php';

$redis = new Redis();
$redis->connect($host, (int) $port);
$redis->select((int) $db);
// pop never touches the database: a connection that refuses to connect.
$database = new MySqlConnection(static fn () => throw new LogicException('sizes.php uses no database'));
$queue = new OutboxQueue($redis, $database, new QueueOptions([
    'queue' => 'outbox:order', 'group' => 'billing', 'consumer' => 'sizes-1',
    'jobs' => ['order.placed' => SizesJob::class],
]));
$queue->setContainer(new Container());
$queue->setConnectionName('outbox');

$sizes = static fn (): array => [
    'size' => $queue->size(),
    'pending' => $queue->pendingSize(),
    'delayed' => $queue->delayedSize(),
    'reserved' => $queue->reservedSize(),
    'oldest' => $queue->creationTimeOfOldestPendingJob(),
];
$result = ['empty' => $sizes(), 'ids' => []];
for ($i = 1; $i <= 3; $i++) {
    $result['ids'][] = $redis->xAdd('outbox:order', '*', ['event_type' => 'order.placed', 'message_id' => "m$i"]);
}
$result['appended'] = $sizes();
$result['popped'] = $queue->pop()?->getJobId();
$result['after_pop'] = $sizes();
echo json_encode($result), "\n";
