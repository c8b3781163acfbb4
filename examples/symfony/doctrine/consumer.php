<?php
// Consumes a stream through Symfony Messenger's Redis transport (receiver
// get/ack, as its worker does) and prints "handled <id>" per message, until
// --expect messages were handled or --seconds passed.
//
//   php consumer.php --dsn redis://127.0.0.1:6379/outbox:default/app/c1 --dbindex 0 --expect 7 --seconds 60
declare(strict_types=1);

require 'Symfony/Component/Messenger/Bridge/Redis/autoload.php';

use Symfony\Component\Messenger\Bridge\Redis\Transport\Connection;
use Symfony\Component\Messenger\Bridge\Redis\Transport\RedisTransport;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;

$opt = getopt('', ['dsn:', 'dbindex:', 'expect:', 'seconds:']);
$transport = new RedisTransport(Connection::fromDsn($opt['dsn'], [
    'dbindex' => (int) ($opt['dbindex'] ?? 0),
    'delete_after_ack' => false,
]), new PhpSerializer());

$expect = (int) ($opt['expect'] ?? 1);
$deadline = microtime(true) + (float) ($opt['seconds'] ?? 60);
$handled = 0;
while ($handled < $expect && microtime(true) < $deadline) {
    $got = false;
    foreach ($transport->get() as $envelope) {
        $got = true;
        echo 'handled ', $envelope->getMessage()->id, "\n";
        $transport->ack($envelope);
        $handled++;
    }
    if (!$got) {
        usleep(100000);
    }
}
