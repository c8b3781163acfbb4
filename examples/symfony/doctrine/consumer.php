<?php
// A Messenger Worker on the Redis transport, the stream the relay fills
// from messenger_messages (`bin/console messenger:consume` in an
// application): its handler records each message it handles in the table
// handled_messages (message id and the time in milliseconds, in the
// handler's transaction), until --expect messages were handled or
// --seconds passed. The Redis transport moves a delayed message from
// <stream>__queue to the stream once due, on its own clock.
//
//   php consumer.php --dsn redis://127.0.0.1:6379/outbox:default/app/c1 --dbindex 0 --expect 7 --seconds 60
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\Messenger\Bridge\Redis\Transport\Connection;
use Symfony\Component\Messenger\Bridge\Redis\Transport\RedisTransport;
use Symfony\Component\Messenger\EventListener\StopWorkerOnTimeLimitListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;
use Symfony\Component\Messenger\Worker;

$opt = getopt('', ['dsn:', 'dbindex:', 'expect:', 'seconds:']);
$dbal = dbal();
$dbal->executeStatement('CREATE TABLE IF NOT EXISTS handled_messages (id BIGINT AUTO_INCREMENT PRIMARY KEY, message_id VARCHAR(64) NOT NULL, handled_at_ms BIGINT NOT NULL)');

$transport = new RedisTransport(Connection::fromDsn($opt['dsn'], [
    'dbindex' => (int) ($opt['dbindex'] ?? 0),
    'delete_after_ack' => false,
]), new PhpSerializer());

$expect = (int) ($opt['expect'] ?? 1);
$handled = 0;
$worker = null;
$handler = function (Ping $msg) use ($dbal, &$handled, $expect, &$worker): void {
    $dbal->transactional(fn () => $dbal->insert('handled_messages', [
        'message_id' => $msg->id,
        'handled_at_ms' => (int) floor(microtime(true) * 1000),
    ]));
    echo "handled {$msg->id}\n";
    if (++$handled >= $expect) {
        $worker->stop();
    }
};
$bus = new MessageBus([new HandleMessageMiddleware(new HandlersLocator([Ping::class => [$handler]]))]);
$dispatcher = new EventDispatcher();
$dispatcher->addSubscriber(new StopWorkerOnTimeLimitListener((int) ($opt['seconds'] ?? 60)));
$worker = new Worker(['redis' => $transport], $bus, $dispatcher);
$worker->run(['sleep' => 50000]);
