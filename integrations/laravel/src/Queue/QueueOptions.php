<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel\Queue;

/**
 * QueueOptions is an outbox queue connection's settings of config/queue.php.
 */
final class QueueOptions
{
    /** the stream read when queue:work names none (with stream_prefix: the queue) */
    public string $stream;
    /** with the relay's streams of jobs (--format laravel-stream), what starts every queue's stream, e.g. outbox:jobs: */
    public ?string $streamPrefix;
    public string $group;
    /** unique in the group and stable across restarts, e.g. the host and a process number */
    public string $consumer;
    /** seconds an entry stays pending with its worker before another may claim it */
    public int $retryAfter;
    /** seconds a read blocks waiting for a new entry */
    public int $blockFor;
    public string $deadLetterStream;
    public string $inboxTable;
    /** @var array<string, class-string> event_type => job class with handle(OutboxMessage) */
    public array $jobs;

    public function __construct(array $config)
    {
        $this->stream = $config['queue'] ?? 'outbox:default';
        $this->streamPrefix = $config['stream_prefix'] ?? null;
        $this->group = $config['group'] ?? 'laravel';
        $this->consumer = (string) ($config['consumer'] ?? (gethostname() . '-' . getmypid()));
        $this->retryAfter = (int) ($config['retry_after'] ?? 90);
        $this->blockFor = (int) ($config['block_for'] ?? 2);
        $this->deadLetterStream = $config['dead_letter_stream'] ?? 'outbox:dead-letter';
        $this->inboxTable = $config['inbox_table'] ?? 'processed_messages';
        $this->jobs = $config['jobs'] ?? [];
    }
}
