<?php

namespace App\Services;

use App\Models\Order;
use Illuminate\Support\Facades\DB;

/**
 * OrderService changes orders and records the events that announce the
 * changes in the same transaction: the event exists if and only if the
 * change was committed. Do not dispatch a job or publish to Redis here, not
 * even in an afterCommit callback: a crash between the commit and the
 * publish loses the event. binlog-outbox publishes it from the binlog.
 */
class OrderService
{
    /** CREDIT_LIMIT_CENTS bounds what one customer's placed orders may add up to. */
    public const CREDIT_LIMIT_CENTS = 100000;

    public function place(string $customer, int $totalCents, ?string $traceId = null): Order
    {
        return DB::transaction(function () use ($customer, $totalCents, $traceId) {
            $order = Order::create([
                'customer' => $customer,
                'total_cents' => $totalCents,
                'status' => 'placed',
            ]);

            // Order uses RecordsOutboxEvents: Outbox::record('order', $order->id, ...).
            $order->recordOutboxEvent('order.placed', [
                'order_id' => $order->id,
                'customer' => $order->customer,
                'total_cents' => $order->total_cents,
            ], headers: array_filter(['trace_id' => $traceId]));

            // Checked with the new order written: the exception rolls back the
            // order and its event together, and the relay never sees either.
            $open = Order::where('customer', $customer)->where('status', 'placed')->sum('total_cents');
            if ($open > self::CREDIT_LIMIT_CENTS) {
                throw new CreditLimitExceeded("customer $customer would owe $open cents, over the limit of " . self::CREDIT_LIMIT_CENTS);
            }

            return $order;
        });
    }

    public function markPaid(Order $order): void
    {
        DB::transaction(function () use ($order) {
            // The row lock orders concurrent changes of one order, and so the
            // order of its events in the stream.
            $order = Order::whereKey($order->id)->lockForUpdate()->firstOrFail();
            $order->update(['status' => 'paid']);

            $order->recordOutboxEvent('order.paid', ['order_id' => $order->id]);
        });
    }
}
