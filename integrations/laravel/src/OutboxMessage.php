<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

/**
 * OutboxMessage is an event as the relay appended it to its stream
 * (docs/entries.md), what a consumer's job class handles.
 */
final class OutboxMessage
{
    /**
     * @param array<mixed> $payload
     * @param array<string, mixed> $headers
     */
    public function __construct(
        public string $entryId,
        public string $messageId,
        public string $aggregateType,
        public string $aggregateId,
        public string $eventType,
        public array $payload,
        public array $headers,
        public ?int $schemaVersion,
        public string $occurredAt,
    ) {
    }

    /** @param array<string, string> $fields */
    public static function fromEntry(string $entryId, array $fields): self
    {
        return new self(
            $entryId,
            $fields['message_id'] ?? '',
            $fields['aggregate_type'] ?? '',
            $fields['aggregate_id'] ?? '',
            $fields['event_type'] ?? '',
            json_decode($fields['payload'] ?? 'null', true) ?? [],
            ($fields['headers'] ?? '') === '' ? [] : (json_decode($fields['headers'], true) ?? []),
            isset($fields['schema_version']) ? (int) $fields['schema_version'] : null,
            $fields['occurred_at'] ?? '',
        );
    }
}
