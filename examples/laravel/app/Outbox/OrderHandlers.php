<?php

namespace App\Outbox;

use BinlogOutbox\Event;

/**
 * OrderHandlers is what this service does with order events (config/outbox.php
 * maps the event types to the methods). Each method runs inside the inbox's
 * DB::transaction: its DB:: and Eloquent writes commit with the inbox row, and
 * an exception rolls them back and leaves the entry pending for a retry.
 */
class OrderHandlers
{
    public function placed(Event $event): void
    {
        $this->orderId($event);
        // e.g. Invoice::create(['order_id' => $this->orderId($event), ...]);
    }

    public function paid(Event $event): void
    {
        $this->orderId($event);
        // e.g. Invoice::where('order_id', ...)->update(['paid_at' => $event->occurredAt]);
    }

    private function orderId(Event $event): int
    {
        $id = $event->payload['order_id'] ?? null;
        if (!is_int($id)) {
            throw new \UnexpectedValueException("{$event->eventType} {$event->messageId} has no integer order_id");
        }
        return $id;
    }
}
