<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use Illuminate\Database\ConnectionResolverInterface;
use Illuminate\Support\Carbon;
use JsonSerializable;

/**
 * OutboxRecorder writes outbox rows on the outbox's connection, in the
 * transaction in progress there; the Outbox facade calls it.
 */
class OutboxRecorder
{
    public function __construct(
        private ConnectionResolverInterface $db,
        private ?string $connection = null,
        private string $table = 'outbox',
    ) {
    }

    /**
     * record inserts an event into the outbox table inside the current
     * DB::transaction, so that it commits or rolls back with the state change
     * it announces, and returns it (its message_id is a new ULID). Outside a
     * transaction it throws NotInTransaction and writes nothing.
     *
     * @param array<mixed>|JsonSerializable $payload the entry's payload, as JSON
     * @param int|null $schemaVersion the payload's schema version, for consumers that read several
     * @param array<string, mixed> $headers tracing and the like; the entry carries them as headers
     */
    public function record(
        string $aggregateType,
        string|int $aggregateId,
        string $eventType,
        array|JsonSerializable $payload,
        ?int $schemaVersion = null,
        array $headers = [],
    ): OutboxEvent {
        $connection = $this->db->connection($this->connection);
        if ($connection->transactionLevel() === 0) {
            throw new NotInTransaction(sprintf(
                'outbox event %s of %s %s recorded outside a transaction on connection %s: call Outbox::record inside DB::transaction(), with the state change it announces',
                $eventType,
                $aggregateType,
                $aggregateId,
                $connection->getName(),
            ));
        }
        $event = new OutboxEvent();
        $event->setConnection($connection->getName());
        $event->setTable($this->table);
        $event->fill([
            'message_id' => Ulid::generate(),
            'aggregate_type' => $aggregateType,
            'aggregate_id' => (string) $aggregateId,
            'event_type' => $eventType,
            'schema_version' => $schemaVersion,
            'payload' => $payload instanceof JsonSerializable ? $payload->jsonSerialize() : $payload,
            'headers' => $headers ?: null,
            // DATETIME has no zone; the relay reads occurred_at as UTC.
            'occurred_at' => Carbon::now('UTC'),
        ]);
        $event->save();
        return $event;
    }
}
