<?php
// Dispatches messages through Symfony Messenger's Doctrine transport inside
// the application's transaction ($connection->transactional()), as a Symfony
// app with `messenger.transport.doctrine` does; the relay's
// --source symfony-doctrine carries the committed rows to the Redis transport.
// Prints "committed <id>", "rolledback <id>" and "delayed <id>" lines.
//
//   php producer.php --messages 10 --rollback-every 3 --delay-ms 60000
declare(strict_types=1);

require 'Doctrine/DBAL/autoload.php';
require 'Symfony/Component/Messenger/Bridge/Doctrine/autoload.php';

use Doctrine\DBAL\DriverManager;
use Symfony\Component\Messenger\Bridge\Doctrine\Transport\Connection;
use Symfony\Component\Messenger\Bridge\Doctrine\Transport\DoctrineTransport;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Stamp\DelayStamp;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;

$opt = getopt('', ['messages:', 'rollback-every:', 'delay-ms:', 'queue:']);
$env = fn (string $k, string $d = ''): string => getenv($k) === false ? $d : (string) getenv($k);

$dbal = DriverManager::getConnection([
    'driver' => 'pdo_mysql',
    'host' => $env('EXAMPLE_DB_HOST', '127.0.0.1'),
    'port' => (int) $env('EXAMPLE_DB_PORT', '3306'),
    'dbname' => $env('EXAMPLE_DB_NAME', 'app'),
    'user' => $env('EXAMPLE_DB_USER', 'root'),
    'password' => $env('EXAMPLE_DB_PASSWORD'),
]);
$transport = new DoctrineTransport(new Connection([
    'table_name' => 'messenger_messages',
    'queue_name' => $opt['queue'] ?? 'default',
    'redeliver_timeout' => 3600,
    'auto_setup' => false,
], $dbal), new PhpSerializer());

$n = (int) ($opt['messages'] ?? 10);
$every = (int) ($opt['rollback-every'] ?? 0);
for ($i = 1; $i <= $n; $i++) {
    $msg = new stdClass();
    $msg->id = sprintf('m-%d-%d', getmypid(), $i);
    try {
        $dbal->transactional(function () use ($transport, $msg, $i, $every): void {
            $transport->send(new Envelope($msg));
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
    $msg = new stdClass();
    $msg->id = sprintf('d-%d', getmypid());
    $dbal->transactional(fn () => $transport->send(new Envelope($msg, [new DelayStamp((int) $opt['delay-ms'])])));
    echo "delayed {$msg->id}\n";
}
