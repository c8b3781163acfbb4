<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use Illuminate\Database\Eloquent\Model;

/**
 * OutboxEvent is a row of the outbox table that binlog-outbox relays to the
 * Redis stream outbox:{aggregate_type}. Write it with Outbox::record (or a
 * model's RecordsOutboxEvents), which refuses outside a transaction; never
 * update or delete it afterwards (binlog mode relays inserts only; poll mode
 * sets sent_at itself). Its Eloquent events (created) tell the application
 * what it recorded.
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
        'schema_version' => 'integer',
        'payload' => 'array',
        'headers' => 'array',
        'occurred_at' => 'datetime',
    ];
}
