<?php
// The outbox fields of a message (--messenger-stamp App\Messenger\OutboxStamp).
//
// binlog-outbox writes them into the entry's X-Message-Stamp-<class> header,
// from which Messenger's Serializer builds this stamp on the Envelope; the
// entry's plain headers (message_id, ...) do not survive the decoding. A
// stamp is sent along with a retry and into the failure transport, so
// middleware sees the same messageId on every delivery.
//
// Public properties without a constructor: the Serializer fills them by name
// with or without the camel_case_to_snake_case name converter.

declare(strict_types=1);

namespace App\Messenger;

use Symfony\Component\Messenger\Stamp\StampInterface;

final class OutboxStamp implements StampInterface
{
    public string $messageId = '';
    public string $aggregateType = '';
    public string $aggregateId = '';
    public string $eventType = '';
    /** RFC 3339 in UTC with microseconds, e.g. 2026-11-29T10:00:00.123456Z. */
    public string $occurredAt = '';
    public string $outboxId = '';
}
