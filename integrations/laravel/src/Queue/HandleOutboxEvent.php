<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

use BinlogOutbox\Laravel\OutboxMessage;
use Illuminate\Contracts\Container\Container;
use Illuminate\Database\QueryException;

/**
 * HandleOutboxEvent runs an OutboxJob: the event type's job class handles
 * the event in a transaction that also inserts its message_id into the
 * inbox, and only after that transaction commits is the entry acknowledged.
 * A redelivered message_id hits the inbox's primary key: acknowledged,
 * skipped.
 */
class HandleOutboxEvent
{
    /** ER_DUP_ENTRY: MySQL's and MariaDB's error number for a duplicate key. */
    private const DUPLICATE_KEY = 1062;

    public function __construct(private Container $container)
    {
    }

    public function handle(OutboxJob $job, array $data): void
    {
        $queue = $job->outbox();
        $options = $queue->options();
        $db = $queue->database();
        $message = OutboxMessage::fromEntry($data['entry_id'], $data['entry']);
        $db->transaction(function () use ($db, $options, $message, $data, $job) {
            try {
                $db->table($options->inboxTable)->insert([
                    'consumer_group' => $options->group,
                    'message_id' => $message->messageId,
                    'stream' => $data['stream'],
                    'entry_id' => $data['entry_id'],
                    'event_type' => $message->eventType,
                    'aggregate_id' => $message->aggregateId,
                    'consumer' => $options->consumer,
                ]);
            } catch (QueryException $e) {
                if (($e->errorInfo[1] ?? null) === self::DUPLICATE_KEY) {
                    return; // handled before; its effects are committed
                }
                throw $e;
            }
            $this->container->make($data['class'])->handle($message, $job->attempts());
        });
        $job->delete();
    }

    /** failed tells the job class, when it has a failed method, that the event failed for good. */
    public function failed(array $data, $e): void
    {
        $handler = $this->container->make($data['class']);
        if (method_exists($handler, 'failed')) {
            $handler->failed(OutboxMessage::fromEntry($data['entry_id'], $data['entry']), $e);
        }
    }
}
