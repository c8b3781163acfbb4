<?php
// A Messenger message that binlog-outbox delivers for outbox rows of event
// type order.placed (--messenger-class order.placed=App\Message\OrderPlaced).
// The Symfony Serializer fills it from the row's JSON payload; with the
// camel_case_to_snake_case name converter the payload's order_id becomes
// $orderId.

declare(strict_types=1);

namespace App\Message;

final class OrderPlaced
{
    public int $orderId = 0;
    public string $customer = '';
    public int $totalCents = 0;
    public string $status = '';
}
