<?php
// consumer.php: the consumer half of the outbox pattern, with phpredis and PDO.
//
// A thin command line around BinlogOutbox\OutboxConsumer (lib/): it reads the
// stream binlog-outbox appends to with a consumer group and processes each
// event exactly once: the handler's writes and the inbox row commit together,
// XACK follows COMMIT, entries of crashed workers are taken over with
// XAUTOCLAIM after --min-idle-ms, an entry that keeps failing goes to the
// dead-letter stream after --max-deliveries, and SIGTERM/SIGINT stop the
// worker after the entry in progress.
//
//   php examples/php/consumer.php --stream outbox:order --group billing --consumer billing-1
//   php examples/php/consumer.php --drain   # exit when nothing is new and nothing pending
//   php examples/php/consumer.php --once    # one read (and claim) round, then exit

declare(strict_types=1);

require __DIR__ . '/common.php';

use BinlogOutbox\ConsumerConfig;
use BinlogOutbox\Event;
use BinlogOutbox\OutboxConsumer;
use BinlogOutbox\PdoInbox;

$o = options($argv, [
    'dsn' => env('EXAMPLE_PDO_DSN', 'mysql:host=127.0.0.1;port=3306;dbname=app'),
    'user' => env('EXAMPLE_DB_USER', 'app'),
    'password' => env('EXAMPLE_DB_PASSWORD', 'app'),
    'redis-host' => env('EXAMPLE_REDIS_HOST', '127.0.0.1'),
    'redis-port' => env('EXAMPLE_REDIS_PORT', '6379'),
    'redis-db' => env('EXAMPLE_REDIS_DB', '0'),
    'stream' => 'outbox:order',
    'group' => 'billing',
    // Stable across restarts of one process, unique among the group's processes.
    'consumer' => gethostname() . '-' . getmypid(),
    'dead-letter-stream' => 'outbox:dead-letter',
    'max-deliveries' => (string) ConsumerConfig::DEFAULT_MAX_DELIVERIES,
    'min-idle-ms' => (string) ConsumerConfig::DEFAULT_MIN_IDLE_MS,
    'count' => '100',
    'block-ms' => '2000',
    'once' => false,
    'drain' => false,
]);

$status = 0;
try {
    $pdo = pdo($o);
    $consumer = new OutboxConsumer(redisClient($o), new PdoInbox($pdo), new ConsumerConfig(
        stream: $o['stream'],
        group: $o['group'],
        consumer: $o['consumer'],
        deadLetterStream: $o['dead-letter-stream'],
        maxDeliveries: (int) $o['max-deliveries'],
        minIdleMs: (int) $o['min-idle-ms'],
        count: (int) $o['count'],
        blockMs: (int) $o['block-ms'],
    ));
    // The business logic: each handler runs in the inbox transaction, so its
    // writes through $pdo commit or roll back with the inbox row.
    $consumer->on('order.placed', 'requireObjectPayload');
    $consumer->on('order.paid', 'requireObjectPayload');
    if ($o['once']) {
        $consumer->ensureGroup();
        $consumer->step((int) $o['block-ms']);
    } elseif ($o['drain']) {
        $consumer->drain();
    } else {
        $consumer->run();
    }
} catch (Throwable $e) {
    fwrite(STDERR, "consumer.php: {$e->getMessage()}\n");
    $status = 1;
}
if (isset($consumer)) {
    echo $consumer->summary(), "\n";
}
exit($status);

/**
 * requireObjectPayload stands for the business logic. Event::fromEntry has
 * already refused a payload that is not a JSON object (a poison message for
 * the tests); a real handler would write its state here.
 */
function requireObjectPayload(Event $event): void
{
    if (!isset($event->payload['order_id'])) {
        throw new UnexpectedValueException("{$event->eventType} {$event->messageId} has no order_id");
    }
}
