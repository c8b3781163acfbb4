<?php

use Illuminate\Database\Migrations\Migration;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Support\Facades\Schema;

// invoice_lines is what BillOrder writes for each order event: the effect
// that must happen once per committed event.
return new class extends Migration
{
    public function up(): void
    {
        Schema::create('invoice_lines', function (Blueprint $table) {
            $table->id();
            $table->unsignedBigInteger('order_id');
            $table->string('event_type', 255);
            $table->string('message_id', 64);
            $table->unsignedInteger('attempt');
        });
    }

    public function down(): void
    {
        Schema::dropIfExists('invoice_lines');
    }
};
