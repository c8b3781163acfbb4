<?php
// The message of event type order.cancelled. Its handler in the example
// always fails, so that the test sees Messenger retry it and then move it to
// the failure transport.

declare(strict_types=1);

namespace App\Message;

final class OrderCancelled
{
    public int $orderId = 0;
    public string $reason = '';
}
