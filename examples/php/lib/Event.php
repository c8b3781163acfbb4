<?php

declare(strict_types=1);

namespace BinlogOutbox;

/**
 * Event is one stream entry as binlog-outbox writes it, decoded: the outbox
 * row's columns, the payload as an array, and where the entry came from.
 */
final class Event
{
    /**
     * @param array<string, mixed> $payload the decoded JSON payload
     * @param array<string, mixed> $headers the decoded headers column ([] when empty)
     * @param array<string, string> $fields every field of the entry, as read
     */
    public function __construct(
        public readonly string $stream,
        public readonly string $entryId,
        public readonly string $messageId,
        public readonly string $aggregateType,
        public readonly string $aggregateId,
        public readonly string $eventType,
        public readonly array $payload,
        public readonly array $headers,
        public readonly ?\DateTimeImmutable $occurredAt,
        public readonly array $fields,
        public readonly int $deliveries,
    ) {
    }

    /**
     * fromEntry decodes an entry; it throws \UnexpectedValueException for
     * one that is not an outbox event (no message_id, a payload that is not
     * a JSON object), which the consumer treats as a failed delivery.
     *
     * @param array<string, string> $fields
     */
    public static function fromEntry(string $stream, string $entryId, array $fields, int $deliveries): self
    {
        $messageId = (string) ($fields['message_id'] ?? '');
        if ($messageId === '') {
            throw new \UnexpectedValueException("entry $entryId of $stream has no message_id field: not written by binlog-outbox?");
        }
        $occurredAt = null;
        if (($fields['occurred_at'] ?? '') !== '') {
            try {
                $occurredAt = new \DateTimeImmutable($fields['occurred_at']);
            } catch (\Exception $e) {
                throw new \UnexpectedValueException("entry $entryId: occurred_at {$fields['occurred_at']} is not a time: {$e->getMessage()}", 0, $e);
            }
        }
        return new self(
            $stream,
            $entryId,
            $messageId,
            (string) ($fields['aggregate_type'] ?? ''),
            (string) ($fields['aggregate_id'] ?? ''),
            (string) ($fields['event_type'] ?? ''),
            self::object($fields['payload'] ?? '', 'payload', $entryId),
            ($fields['headers'] ?? '') === '' ? [] : self::object($fields['headers'], 'headers', $entryId),
            $occurredAt,
            $fields,
            $deliveries,
        );
    }

    /** @return array<string, mixed> */
    private static function object(string $json, string $field, string $entryId): array
    {
        try {
            $value = json_decode($json, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new \UnexpectedValueException("entry $entryId: $field is not JSON: {$e->getMessage()}", 0, $e);
        }
        // An empty array decodes from both {} and []: accept it as the empty object.
        if (!is_array($value) || ($value !== [] && array_is_list($value))) {
            throw new \UnexpectedValueException("entry $entryId: $field is not a JSON object");
        }
        return $value;
    }
}
