<?php

declare(strict_types=1);

namespace BinlogOutbox;

/**
 * Inbox records which events a consumer group has processed, in the
 * database transaction of the processing itself, so that a redelivered
 * entry is recognised and its effects are not applied twice.
 */
interface Inbox
{
    /**
     * process runs $handler($event) in one database transaction with the
     * insert of the event's inbox row (group, message_id), and commits both
     * or neither. It returns false, without running the handler, when the
     * group has processed the message before (a redelivery).
     *
     * It throws HandlerFailed, after rolling back, when the handler throws;
     * any other exception means the inbox itself failed (the database is
     * unreachable) and nothing was committed.
     *
     * @param callable(Event): void $handler
     */
    public function process(Event $event, string $group, string $consumer, callable $handler): bool;
}
