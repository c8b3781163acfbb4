<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use Illuminate\Support\Facades\Facade;

/**
 * Outbox is the facade of OutboxRecorder:
 *
 *   DB::transaction(function () {
 *       $order = Order::create([...]);
 *       Outbox::record('order', $order->id, 'order.placed', ['order_id' => $order->id]);
 *   });
 *
 * @method static OutboxEvent record(string $aggregateType, string|int $aggregateId, string $eventType, array|\JsonSerializable $payload, ?int $schemaVersion = null, array $headers = [])
 *
 * @see OutboxRecorder::record()
 */
class Outbox extends Facade
{
    protected static function getFacadeAccessor(): string
    {
        return OutboxRecorder::class;
    }
}
