<?php

namespace App\Jobs;

use App\Models\Order;
use BinlogOutbox\Laravel\OutboxMessage;
use Illuminate\Support\Facades\DB;
use RuntimeException;

/**
 * BillOrder is the outbox queue's job for order events (config/queue.php):
 * it writes an invoice line. It runs inside the transaction of the inbox
 * row, so its writes commit with it, and an exception rolls them back and
 * leaves the entry to be retried after the backoff, up to $tries attempts.
 */
class BillOrder
{
    /** Attempts before failed_jobs and the dead-letter stream (--tries applies without it). */
    public $tries = 3;

    /** Seconds before an attempt that failed is tried again. */
    public $backoff = 1;

    public function handle(OutboxMessage $event, int $attempt): void
    {
        $order = Order::findOrFail($event->payload['order_id']);
        // An order on hold cannot be billed: the job fails until someone
        // releases it and runs `php artisan queue:retry`.
        if ($order->status === 'on_hold') {
            throw new RuntimeException("order {$order->id} is on hold");
        }
        // A payment provider that times out on the first attempt for every
        // Nth order (OUTBOX_EXAMPLE_FLAKY_EVERY, 0: never), to show a retry.
        $every = (int) env('OUTBOX_EXAMPLE_FLAKY_EVERY', 0);
        if ($every > 0 && $attempt === 1 && $order->id % $every === 0) {
            throw new RuntimeException("payment provider timed out billing order {$order->id}");
        }
        DB::table('invoice_lines')->insert([
            'order_id' => $order->id,
            'event_type' => $event->eventType,
            'message_id' => $event->messageId,
            'attempt' => $attempt,
        ]);
    }
}
