<?php
// record.php exercises Outbox::record in the Laravel application whose base
// directory is its argument (the suite runs it in examples/laravel, on
// Debian's Laravel 8, after `artisan migrate`), and prints what it recorded
// as JSON: the message ids that must be in the outbox table (committed), the
// ones that must not (rolled_back), and whether a record outside a
// transaction was refused. The Go test checks the table against it.

declare(strict_types=1);

use BinlogOutbox\Laravel\NotInTransaction;
use BinlogOutbox\Laravel\Outbox;
use BinlogOutbox\Laravel\OutboxEvent;
use Illuminate\Support\Facades\DB;

$base = $argv[1] ?? exit("usage: php record.php APP_BASE_PATH\n");
require $base . '/bootstrap/autoload.php';
$app = require $base . '/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

$result = ['committed' => [], 'rolled_back' => [], 'refused' => false];
$pending = [];
OutboxEvent::created(function (OutboxEvent $e) use (&$pending) {
    $pending[] = $e->message_id;
});
$settle = function (string $outcome) use (&$pending, &$result) {
    array_push($result[$outcome], ...$pending);
    $pending = [];
};
final class Rollback extends RuntimeException
{
}

// Outside a transaction: refused, nothing written.
try {
    Outbox::record('order', 1, 'order.placed', ['order_id' => 1]);
} catch (NotInTransaction $e) {
    $result['refused'] = true;
}
$settle('rolled_back');

// Committed, with a schema version and headers.
DB::transaction(function () {
    Outbox::record('order', 2, 'order.placed', ['order_id' => 2], 3, ['trace_id' => 'trace-2']);
});
$settle('committed');

// Rolled back with the transaction.
try {
    DB::transaction(function () {
        Outbox::record('order', 3, 'order.placed', ['order_id' => 3]);
        throw new Rollback('over the limit');
    });
} catch (Rollback $e) {
}
$settle('rolled_back');

// Nested: the inner transaction (a savepoint) rolls back its event, the outer
// one commits its own.
DB::transaction(function () use ($settle) {
    Outbox::record('order', 4, 'order.placed', ['order_id' => 4]);
    try {
        DB::transaction(function () use ($settle) {
            $settle('committed');
            Outbox::record('order', 4, 'order.discounted', ['order_id' => 4]);
            throw new Rollback('discount refused');
        });
    } catch (Rollback $e) {
        $settle('rolled_back');
    }
    Outbox::record('order', 4, 'order.paid', ['order_id' => 4]);
});
$settle('committed');

// Nested, and the outer transaction rolls back both.
try {
    DB::transaction(function () {
        Outbox::record('order', 5, 'order.placed', ['order_id' => 5]);
        DB::transaction(function () {
            Outbox::record('order', 5, 'order.paid', ['order_id' => 5]);
        });
        throw new Rollback('payment reversed');
    });
} catch (Rollback $e) {
}
$settle('rolled_back');

// The Eloquent trait: the model is the aggregate.
DB::transaction(function () {
    $order = App\Models\Order::create(['customer' => 'trait', 'total_cents' => 100, 'status' => 'placed']);
    $order->recordOutboxEvent('order.placed', ['order_id' => $order->id]);
});
$settle('committed');

echo json_encode($result), "\n";
