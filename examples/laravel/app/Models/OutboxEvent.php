<?php

namespace App\Models;

use BinlogOutbox\Ulid;
use Illuminate\Database\Eloquent\Model;

/**
 * OutboxEvent is a row of the outbox table that binlog-outbox relays to the
 * Redis stream outbox:{aggregate_type}. Create it inside the DB::transaction
 * of the state change it announces; never update or delete it afterwards
 * (binlog mode relays inserts only; poll mode sets sent_at itself).
 *
 * @property int $id
 * @property string $message_id
 * @property string $aggregate_type
 * @property string $aggregate_id
 * @property string $event_type
 * @property int|null $schema_version the payload's schema version; entries carry it as schema_version
 * @property array $payload
 * @property array|null $headers
 * @property \Illuminate\Support\Carbon $occurred_at
 */
class OutboxEvent extends Model
{
    protected $table = 'outbox';

    // The table has no created_at/updated_at: occurred_at is the event's time.
    public $timestamps = false;

    // DATETIME(6): keep the microseconds.
    protected $dateFormat = 'Y-m-d H:i:s.u';

    protected $fillable = [
        'message_id', 'aggregate_type', 'aggregate_id', 'event_type', 'schema_version', 'payload', 'headers', 'occurred_at',
    ];

    protected $casts = [
        'payload' => 'array',
        'headers' => 'array',
        'occurred_at' => 'datetime',
    ];

    protected static function booted(): void
    {
        static::creating(function (OutboxEvent $event) {
            // A ULID: unique, and sorts by time; consumers deduplicate on it.
            // (Str::ulid() on Laravel 9+ makes the same.)
            $event->message_id ??= Ulid::generate();
            // DATETIME has no zone; the relay reads occurred_at as UTC.
            $event->occurred_at ??= now('UTC');
        });
    }

    /** record creates an event; call it inside DB::transaction(). */
    public static function record(string $aggregateType, string|int $aggregateId, string $eventType, array $payload, array $headers = []): self
    {
        return static::create([
            'aggregate_type' => $aggregateType,
            'aggregate_id' => (string) $aggregateId,
            'event_type' => $eventType,
            'payload' => $payload,
            'headers' => $headers ?: null,
        ]);
    }
}
