<?php
// OrderHandler handles the order messages. It runs inside InboxMiddleware's
// transaction: what it writes through the same connection commits with the
// inbox row, or not at all.
//
// For the test it fails the first attempt of every $failFirstEvery'th order
// (Messenger retries it) and every order.cancelled message (Messenger
// retries it, then moves it to the failure transport).

declare(strict_types=1);

namespace App\MessageHandler;

use App\Message\OrderCancelled;
use App\Message\OrderPaid;
use App\Message\OrderPlaced;
use PDO;
use RuntimeException;

final class OrderHandler
{
    private PDO $pdo;
    private int $failFirstEvery;
    /** @var array<string, true> the messages that failed once in this process */
    private array $failed = [];

    public function __construct(PDO $pdo, int $failFirstEvery)
    {
        $this->pdo = $pdo;
        $this->failFirstEvery = $failFirstEvery;
    }

    /** @param OrderPlaced|OrderPaid|OrderCancelled $message */
    public function __invoke(object $message): void
    {
        if ($message instanceof OrderCancelled) {
            throw new RuntimeException("order {$message->orderId}: cancelling is not implemented (simulated permanent failure)");
        }
        $key = get_class($message) . ':' . $message->orderId;
        if ($this->failFirstEvery > 0 && $message->orderId % $this->failFirstEvery === 0 && !isset($this->failed[$key])) {
            $this->failed[$key] = true;
            throw new RuntimeException("order {$message->orderId}: simulated transient failure");
        }
        // The effect, in the inbox row's transaction.
        $this->pdo->prepare('UPDATE orders SET status = ? WHERE id = ?')
            ->execute([$message instanceof OrderPaid ? 'paid-seen' : 'placed-seen', $message->orderId]);
    }
}
