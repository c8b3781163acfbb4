<?php
// worker.php: OutboxConsumer with handlers that misbehave on purpose, for
// examples/consumer_test.go. Each handler writes a row into consumer_effects
// through the inbox's connection, so the test sees which effects committed.
//
//   test.effect  writes its effect
//   test.poison  writes its effect, then throws (the effect must roll back)
//   test.slow    writes its effect, creates --slow-started, waits for --slow-release
//
// --crash-after-commit ID kills the worker with SIGKILL right after the
// COMMIT of message ID, before its XACK: the crash the inbox exists for.

declare(strict_types=1);

require dirname(__DIR__, 2) . '/common.php';

use BinlogOutbox\ConsumerConfig;
use BinlogOutbox\Event;
use BinlogOutbox\Inbox;
use BinlogOutbox\OutboxConsumer;
use BinlogOutbox\PdoInbox;

$o = options($argv, [
    'dsn' => env('EXAMPLE_PDO_DSN', ''),
    'user' => env('EXAMPLE_DB_USER', ''),
    'password' => env('EXAMPLE_DB_PASSWORD', ''),
    'redis-host' => env('EXAMPLE_REDIS_HOST', '127.0.0.1'),
    'redis-port' => env('EXAMPLE_REDIS_PORT', '6379'),
    'redis-db' => env('EXAMPLE_REDIS_DB', '0'),
    'stream' => '',
    'group' => 'test',
    'consumer' => '',
    'dead-letter-stream' => 'outbox:dead-letter',
    'max-deliveries' => '3',
    'min-idle-ms' => '300',
    'block-ms' => '500',
    'mode' => 'drain',
    'crash-after-commit' => '',
    'slow-started' => '',
    'slow-release' => '',
    'redis-prefix' => '', // a Laravel-style key prefix, which the consumer must refuse
]);

/** CrashingInbox dies between the COMMIT and the XACK of one message. */
final class CrashingInbox implements Inbox
{
    public function __construct(private Inbox $inner, private string $messageId)
    {
    }

    public function process(Event $event, string $group, string $consumer, callable $handler): bool
    {
        $fresh = $this->inner->process($event, $group, $consumer, $handler);
        if ($event->messageId === $this->messageId) {
            posix_kill(getmypid(), SIGKILL);
        }
        return $fresh;
    }
}

$pdo = pdo($o);
$effect = $pdo->prepare('INSERT INTO consumer_effects (message_id, consumer) VALUES (?, ?)');
$inbox = new PdoInbox($pdo);
if ($o['crash-after-commit'] !== '') {
    $inbox = new CrashingInbox($inbox, $o['crash-after-commit']);
}
$redis = redisClient($o);
$redis->setOption(Redis::OPT_PREFIX, $o['redis-prefix']);
$consumer = new OutboxConsumer($redis, $inbox, new ConsumerConfig(
    stream: $o['stream'],
    group: $o['group'],
    consumer: $o['consumer'],
    deadLetterStream: $o['dead-letter-stream'],
    maxDeliveries: (int) $o['max-deliveries'],
    minIdleMs: (int) $o['min-idle-ms'],
    blockMs: (int) $o['block-ms'],
));
$write = fn (Event $e) => $effect->execute([$e->messageId, $o['consumer']]);
$consumer->on('test.effect', $write);
$consumer->on('test.poison', function (Event $e) use ($write): void {
    $write($e);
    throw new RuntimeException('poison on purpose');
});
$consumer->on('test.slow', function (Event $e) use ($write, $o): void {
    $write($e);
    touch($o['slow-started']);
    // A signal interrupts usleep: the loop goes on until the test releases it.
    for ($deadline = microtime(true) + 60; !file_exists($o['slow-release']); usleep(20000)) {
        if (microtime(true) > $deadline) {
            throw new RuntimeException("{$o['slow-release']} did not appear within 60 s");
        }
    }
});
$o['mode'] === 'run' ? $consumer->run() : $consumer->drain();
echo $consumer->summary(), "\n";
