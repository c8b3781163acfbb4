<?php

use Illuminate\Database\Migrations\Migration;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Support\Facades\Schema;

// The consumers' inbox (examples/schema.sql has the same table): one row per
// message a consumer group processed, written in the transaction of the
// processing. The primary key turns a redelivery into a duplicate-key error,
// which the consumer acknowledges and skips.
return new class extends Migration
{
    public function up(): void
    {
        Schema::create('processed_messages', function (Blueprint $table) {
            $table->engine = 'InnoDB';
            $table->charset = 'utf8mb4';
            $table->string('consumer_group', 191);
            $table->string('message_id', 64);
            $table->string('stream', 255);
            $table->string('entry_id', 64);
            $table->string('event_type', 255);
            $table->string('aggregate_id', 255);
            $table->string('consumer', 255);
            $table->dateTime('processed_at', 6)->useCurrent();
            $table->primary(['consumer_group', 'message_id']);
            // For the nightly DELETE of rows older than the longest redelivery.
            $table->index('processed_at');
        });
    }

    public function down(): void
    {
        Schema::dropIfExists('processed_messages');
    }
};
