<?php

namespace App\Console\Commands;

use App\Services\CreditLimitExceeded;
use App\Services\OrderService;
use BinlogOutbox\Laravel\OutboxEvent;
use Illuminate\Console\Command;

/**
 * PlaceOrders places orders through OrderService, as a web request would:
 * every second order is paid too, and every --rollback-every'th one goes
 * over the customer's credit limit, so that its transaction rolls back and
 * its event must never reach a stream. It prints one line per event:
 *
 *   committed order_id=3 event_type=order.placed message_id=01J...
 *   rolled-back order_id=4 event_type=order.placed message_id=01J...
 */
class PlaceOrders extends Command
{
    protected $signature = 'orders:place {--orders=10} {--rollback-every=4}';

    protected $description = 'Place example orders, some of them rolled back';

    public function handle(OrderService $orders): int
    {
        // The events of the transaction in progress: written, not yet committed.
        $recorded = [];
        OutboxEvent::created(function (OutboxEvent $e) use (&$recorded) {
            $recorded[] = "order_id={$e->aggregate_id} event_type={$e->event_type} message_id={$e->message_id}";
        });
        $print = function (string $outcome) use (&$recorded) {
            foreach ($recorded as $line) {
                $this->line("$outcome $line");
            }
            $recorded = [];
        };

        $every = (int) $this->option('rollback-every');
        for ($i = 1; $i <= (int) $this->option('orders'); $i++) {
            $overLimit = $every > 0 && $i % $every === 0;
            $total = $overLimit ? OrderService::CREDIT_LIMIT_CENTS + 1 : 1000 + $i * 250;
            try {
                $order = $orders->place("customer-$i", $total);
            } catch (CreditLimitExceeded $e) {
                $print('rolled-back');
                continue;
            }
            $print('committed');
            if ($i % 2 === 0) {
                $orders->markPaid($order);
                $print('committed');
            }
        }
        return self::SUCCESS;
    }
}
