<?php
// The message of event type order.paid; the payload is the order's, as for
// order.placed.

declare(strict_types=1);

namespace App\Message;

final class OrderPaid
{
    public int $orderId = 0;
    public string $customer = '';
    public int $totalCents = 0;
    public string $status = '';
}
