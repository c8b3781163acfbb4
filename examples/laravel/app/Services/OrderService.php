<?php

namespace App\Services;

use App\Models\Order;
use App\Models\OutboxEvent;
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
    public function place(string $customer, int $totalCents): Order
    {
        return DB::transaction(function () use ($customer, $totalCents) {
            $order = Order::create([
                'customer' => $customer,
                'total_cents' => $totalCents,
                'status' => 'placed',
            ]);

            OutboxEvent::record('order', $order->id, 'order.placed', [
                'order_id' => $order->id,
                'customer' => $order->customer,
                'total_cents' => $order->total_cents,
            ], ['trace_id' => request()?->header('traceparent')]);

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

            OutboxEvent::record('order', $order->id, 'order.paid', ['order_id' => $order->id]);
        });
    }
}
