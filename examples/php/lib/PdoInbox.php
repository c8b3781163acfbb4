<?php

declare(strict_types=1);

namespace BinlogOutbox;

/**
 * PdoInbox is the Inbox on a PDO connection (MySQL, MariaDB), with the table
 * of examples/schema.sql: primary key (consumer_group, message_id). Handlers
 * write through the same PDO object, inside the transaction this opens.
 */
final class PdoInbox implements Inbox
{
    /** ER_DUP_ENTRY: MySQL's and MariaDB's error number for a duplicate key. */
    private const DUPLICATE_KEY = 1062;

    private \PDOStatement $insert;

    public function __construct(private readonly \PDO $pdo, string $table = 'processed_messages')
    {
        if ($pdo->getAttribute(\PDO::ATTR_ERRMODE) !== \PDO::ERRMODE_EXCEPTION) {
            // Silent errors would turn a failed inbox insert into a processed event.
            throw new \InvalidArgumentException('PdoInbox needs PDO::ATTR_ERRMODE = PDO::ERRMODE_EXCEPTION');
        }
        $quoted = '`' . str_replace('`', '``', $table) . '`';
        $this->insert = $pdo->prepare(
            "INSERT INTO $quoted (consumer_group, message_id, stream, entry_id, event_type, aggregate_id, consumer)
             VALUES (?, ?, ?, ?, ?, ?, ?)"
        );
    }

    public function process(Event $event, string $group, string $consumer, callable $handler): bool
    {
        $this->pdo->beginTransaction();
        try {
            try {
                $this->insert->execute([$group, $event->messageId, $event->stream, $event->entryId, $event->eventType, $event->aggregateId, $consumer]);
            } catch (\PDOException $e) {
                // Only the inbox row's own duplicate is a redelivery: a duplicate
                // key in the handler's writes is the handler's failure.
                if ((int) ($e->errorInfo[1] ?? 0) === self::DUPLICATE_KEY) {
                    $this->pdo->rollBack();
                    return false;
                }
                throw $e;
            }
            try {
                $handler($event);
            } catch (\Throwable $e) {
                throw HandlerFailed::wrap($event, $e);
            }
            $this->pdo->commit();
            return true;
        } catch (\Throwable $e) {
            if ($this->pdo->inTransaction()) {
                $this->pdo->rollBack();
            }
            throw $e;
        }
    }
}
