<?php

declare(strict_types=1);

namespace BinlogOutbox;

/**
 * HandlerFailed wraps what a handler threw, so that the consumer tells a
 * failure of one entry (it stays pending and counts toward max deliveries)
 * from a failure of the inbox or of Redis (the worker stops).
 */
final class HandlerFailed extends \RuntimeException
{
    public static function wrap(Event $event, \Throwable $cause): self
    {
        return new self("handler of {$event->eventType} failed on {$event->messageId}: {$cause->getMessage()}", 0, $cause);
    }
}
