<?php

namespace App\Outbox;

use BinlogOutbox\Event;
use BinlogOutbox\HandlerFailed;
use BinlogOutbox\Inbox;
use Illuminate\Database\ConnectionInterface;
use Illuminate\Database\QueryException;

/**
 * DatabaseInbox is the consumer's Inbox on a Laravel connection: the inbox
 * row and the handler's writes (DB::table, Eloquent, on the same connection)
 * commit in one DB::transaction, which nests as handlers expect.
 */
final class DatabaseInbox implements Inbox
{
    /** ER_DUP_ENTRY: MySQL's and MariaDB's error number for a duplicate key. */
    private const DUPLICATE_KEY = 1062;

    public function __construct(private ConnectionInterface $db, private string $table = 'processed_messages')
    {
    }

    public function process(Event $event, string $group, string $consumer, callable $handler): bool
    {
        return $this->db->transaction(function () use ($event, $group, $consumer, $handler): bool {
            try {
                $this->db->table($this->table)->insert([
                    'consumer_group' => $group,
                    'message_id' => $event->messageId,
                    'stream' => $event->stream,
                    'entry_id' => $event->entryId,
                    'event_type' => $event->eventType,
                    'aggregate_id' => $event->aggregateId,
                    'consumer' => $consumer,
                ]);
            } catch (QueryException $e) {
                // Only the inbox row's own duplicate is a redelivery: a duplicate
                // key in the handler's writes is the handler's failure.
                if ((int) ($e->errorInfo[1] ?? 0) === self::DUPLICATE_KEY) {
                    return false; // nothing written: the empty transaction commits
                }
                throw $e;
            }
            try {
                $handler($event);
            } catch (\Throwable $e) {
                throw HandlerFailed::wrap($event, $e); // DB::transaction rolls back
            }
            return true;
        });
    }
}
