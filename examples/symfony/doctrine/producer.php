<?php
// Dispatches messages on a Messenger bus whose routing sends them to the
// Doctrine transport, inside the application's transaction
// ($connection->transactional()), as a Symfony application with a
// `doctrine://default` transport does; every --rollback-every-th
// transaction throws and rolls back with its message. The relay's
// --source symfony-doctrine carries the committed rows to the Redis
// transport. Prints "committed <id>", "rolledback <id>" and
// "delayed <id>" (the last message, with a DelayStamp of --delay-ms).
//
//   php producer.php --messages 10 --rollback-every 3 --delay-ms 2000
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use App\Messenger\Locator;
use Symfony\Component\Messenger\Bridge\Doctrine\Transport\Connection;
use Symfony\Component\Messenger\Bridge\Doctrine\Transport\DoctrineTransport;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\SendMessageMiddleware;
use Symfony\Component\Messenger\Stamp\DelayStamp;
use Symfony\Component\Messenger\Transport\Sender\SendersLocator;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;

$opt = getopt('', ['messages:', 'rollback-every:', 'delay-ms:', 'queue:']);

$dbal = dbal();
$doctrine = new DoctrineTransport(new Connection([
    'table_name' => 'messenger_messages',
    'queue_name' => $opt['queue'] ?? 'default',
    'redeliver_timeout' => 3600,
    'auto_setup' => false,
], $dbal), new PhpSerializer());
// framework.messenger.routing: Ping: doctrine
$bus = new MessageBus([
    new SendMessageMiddleware(new SendersLocator([Ping::class => ['doctrine']], new Locator(['doctrine' => $doctrine]))),
]);

$n = (int) ($opt['messages'] ?? 10);
$every = (int) ($opt['rollback-every'] ?? 0);
for ($i = 1; $i <= $n; $i++) {
    $msg = new Ping(sprintf('m-%d-%d', getmypid(), $i));
    try {
        $dbal->transactional(function () use ($bus, $msg, $i, $every): void {
            $bus->dispatch($msg);
            if ($every > 0 && $i % $every === 0) {
                throw new RuntimeException('roll back');
            }
        });
        echo "committed {$msg->id}\n";
    } catch (RuntimeException $e) {
        echo "rolledback {$msg->id}\n";
    }
}
if (isset($opt['delay-ms'])) {
    $msg = new Ping(sprintf('d-%d', getmypid()));
    $dbal->transactional(fn () => $bus->dispatch($msg, [new DelayStamp((int) $opt['delay-ms'])]));
    echo "delayed {$msg->id}\n";
}
