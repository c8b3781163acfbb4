<?php

namespace App\Models;

use Illuminate\Database\Eloquent\Model;

/** Order is the example's state: the orders table of examples/schema.sql. */
class Order extends Model
{
    // The table has created_at only.
    const UPDATED_AT = null;

    protected $fillable = ['customer', 'total_cents', 'status'];
}
