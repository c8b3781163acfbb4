<?php
// producer.php: the producer half of the outbox pattern, with PDO.
//
// Each order row is written in the SAME transaction as the outbox rows that
// announce it: the events exist if and only if the order was committed, and
// binlog-outbox relays them to Redis once the transaction commits. Every
// --rollback-every'th transaction is rolled back on purpose: its events must
// never reach a stream.
//
//   php examples/php/producer.php --orders 10 \
//       --dsn 'mysql:host=127.0.0.1;port=3306;dbname=app' --user app --password app
//
// Output, one line per event:
//   committed order_id=3 event_type=order.placed message_id=01J...
//   rolled-back order_id=4 event_type=order.placed message_id=01J...

declare(strict_types=1);

require __DIR__ . '/common.php';
// The ULIDs of the Laravel package, which makes them without Laravel too.
require __DIR__ . '/../../integrations/laravel/src/Ulid.php';

$o = options($argv, [
    'dsn' => env('EXAMPLE_PDO_DSN', 'mysql:host=127.0.0.1;port=3306;dbname=app'),
    'user' => env('EXAMPLE_DB_USER', 'app'),
    'password' => env('EXAMPLE_DB_PASSWORD', 'app'),
    'table' => 'outbox',
    'orders' => '10',
    'rollback-every' => '4',
]);
$pdo = pdo($o);

$insertOrder = $pdo->prepare('INSERT INTO orders (customer, total_cents, status) VALUES (?, ?, ?)');
// occurred_at is a DATETIME without a zone: the relay reads it as UTC.
$insertEvent = $pdo->prepare(
    "INSERT INTO `{$o['table']}` (message_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at)
     VALUES (?, 'order', ?, ?, ?, ?, UTC_TIMESTAMP(6))"
);

for ($i = 1; $i <= (int) $o['orders']; $i++) {
    $rollback = (int) $o['rollback-every'] > 0 && $i % (int) $o['rollback-every'] === 0;
    $status = $i % 2 === 0 ? 'paid' : 'placed';
    $customer = "customer-$i";
    $total = 1000 + $i * 250;

    $pdo->beginTransaction();
    try {
        $insertOrder->execute([$customer, $total, $status]);
        $orderId = (int) $pdo->lastInsertId();
        $lines = [];
        foreach ($status === 'paid' ? ['order.placed', 'order.paid'] : ['order.placed'] as $eventType) {
            $messageId = BinlogOutbox\Laravel\Ulid::generate();
            $payload = json_encode(['order_id' => $orderId, 'customer' => $customer, 'total_cents' => $total, 'status' => $status], JSON_THROW_ON_ERROR);
            $insertEvent->execute([$messageId, (string) $orderId, $eventType, $payload, '{"producer":"producer.php"}']);
            $lines[] = "order_id=$orderId event_type=$eventType message_id=$messageId";
        }
        if ($rollback) {
            $pdo->rollBack();
            foreach ($lines as $l) {
                echo "rolled-back $l\n";
            }
            continue;
        }
        $pdo->commit();
        foreach ($lines as $l) {
            echo "committed $l\n";
        }
    } catch (Throwable $e) {
        if ($pdo->inTransaction()) {
            $pdo->rollBack();
        }
        throw $e;
    }
}
