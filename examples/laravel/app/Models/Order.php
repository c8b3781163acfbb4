<?php

namespace App\Models;

use BinlogOutbox\Laravel\RecordsOutboxEvents;
use Illuminate\Database\Eloquent\Model;

/**
 * Order is the example's state: the orders table of examples/schema.sql. It
 * records its own events (aggregate type order, stream outbox:order).
 */
class Order extends Model
{
    use RecordsOutboxEvents;

    // The table has created_at only.
    const UPDATED_AT = null;

    protected $fillable = ['customer', 'total_cents', 'status'];
}
