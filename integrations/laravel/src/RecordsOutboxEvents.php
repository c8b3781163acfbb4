<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use Illuminate\Support\Str;
use JsonSerializable;

/**
 * RecordsOutboxEvents lets an Eloquent model record its own events, with
 * itself as the aggregate: its key is the aggregate id, and the aggregate
 * type is the property $outboxAggregateType when the model declares one,
 * else its class name in snake case (Order: order, so stream outbox:order).
 * Call it inside the DB::transaction that saves the model.
 */
trait RecordsOutboxEvents
{
    /**
     * recordOutboxEvent records an event of this model in the current
     * transaction; see OutboxRecorder::record.
     *
     * @param array<mixed>|JsonSerializable $payload
     * @param array<string, mixed> $headers
     */
    public function recordOutboxEvent(string $eventType, array|JsonSerializable $payload, ?int $schemaVersion = null, array $headers = []): OutboxEvent
    {
        return Outbox::record($this->outboxAggregateType(), $this->getKey(), $eventType, $payload, $schemaVersion, $headers);
    }

    /** outboxAggregateType names the stream: outbox:{aggregate type}. */
    public function outboxAggregateType(): string
    {
        return property_exists($this, 'outboxAggregateType') ? $this->outboxAggregateType : Str::snake(class_basename($this));
    }
}
