<?php
// InboxMiddleware makes a handler's effects happen once per outbox event.
//
// Streams deliver at least once: a worker can crash after the handler's
// COMMIT and before its XACK, and Messenger then delivers the message again.
// The middleware opens a transaction, records the event's messageId (from
// OutboxStamp) in the inbox table, runs the handlers inside the same
// transaction and commits: a second delivery hits the primary key and is
// acknowledged without running the handlers. A handler that throws rolls the
// inbox row back with its own writes, and Messenger's retry delivers the
// message again.

declare(strict_types=1);

namespace App\Messenger;

use PDO;
use PDOException;
use Symfony\Component\Messenger\Bridge\Redis\Transport\RedisReceivedStamp;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Middleware\MiddlewareInterface;
use Symfony\Component\Messenger\Middleware\StackInterface;
use Symfony\Component\Messenger\Stamp\ReceivedStamp;
use Symfony\Component\Messenger\Stamp\RedeliveryStamp;

final class InboxMiddleware implements MiddlewareInterface
{
    private PDO $pdo;
    private string $group;
    private string $consumer;
    private string $stream;

    public function __construct(PDO $pdo, string $group, string $consumer, string $stream)
    {
        $this->pdo = $pdo;
        $this->group = $group;
        $this->consumer = $consumer;
        $this->stream = $stream;
    }

    public function handle(Envelope $envelope, StackInterface $stack): Envelope
    {
        $outbox = $envelope->last(OutboxStamp::class);
        if ($outbox === null || $envelope->last(ReceivedStamp::class) === null) {
            // Dispatched in this process, or not from the outbox.
            return $stack->next()->handle($envelope, $stack);
        }
        $entry = $envelope->last(RedisReceivedStamp::class);
        $redelivery = $envelope->last(RedeliveryStamp::class);
        $attempt = $redelivery === null ? 0 : $redelivery->getRetryCount();

        $this->pdo->beginTransaction();
        try {
            try {
                $this->pdo->prepare(
                    'INSERT INTO processed_messages (consumer_group, message_id, stream, entry_id, event_type, aggregate_id, consumer)
                     VALUES (?, ?, ?, ?, ?, ?, ?)'
                )->execute([$this->group, $outbox->messageId, $this->stream, $entry === null ? '' : $entry->getId(),
                    $outbox->eventType, $outbox->aggregateId, $this->consumer]);
            } catch (PDOException $e) {
                if (($e->errorInfo[1] ?? 0) !== 1062) {
                    throw $e;
                }
                $this->pdo->rollBack();
                echo "duplicate message_id={$outbox->messageId}\n";
                return $envelope;
            }
            $envelope = $stack->next()->handle($envelope, $stack);
            $this->pdo->commit();
        } catch (\Throwable $e) {
            if ($this->pdo->inTransaction()) {
                $this->pdo->rollBack();
            }
            throw $e;
        }
        echo "handled message_id={$outbox->messageId} event_type={$outbox->eventType} attempt=$attempt\n";
        return $envelope;
    }
}
