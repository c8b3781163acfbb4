<?php

use Illuminate\Database\Migrations\Migration;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Support\Facades\Schema;

// Laravel's database queue table (`php artisan queue:table`), which the relay
// reads with --source laravel-jobs, the batches table (`php artisan
// queue:batches-table`), and job_runs, what App\Jobs\RecordRun writes: the
// effect that must happen once per committed job.
return new class extends Migration
{
    public function up(): void
    {
        Schema::create('jobs', function (Blueprint $table) {
            $table->bigIncrements('id');
            $table->string('queue')->index();
            $table->longText('payload');
            $table->unsignedTinyInteger('attempts');
            $table->unsignedInteger('reserved_at')->nullable();
            $table->unsignedInteger('available_at');
            $table->unsignedInteger('created_at');
        });
        Schema::create('job_batches', function (Blueprint $table) {
            $table->string('id')->primary();
            $table->string('name');
            $table->integer('total_jobs');
            $table->integer('pending_jobs');
            $table->integer('failed_jobs');
            $table->text('failed_job_ids');
            $table->mediumText('options')->nullable();
            $table->integer('cancelled_at')->nullable();
            $table->integer('created_at');
            $table->integer('finished_at')->nullable();
        });
        Schema::create('job_runs', function (Blueprint $table) {
            $table->id();
            $table->string('job_key', 64);
            $table->unsignedInteger('attempt');
            $table->string('queue', 64);
            $table->string('connection', 64);
            $table->string('batch_id', 64)->nullable();
            $table->unsignedInteger('not_before');
            $table->double('ran_at');
        });
    }

    public function down(): void
    {
        Schema::dropIfExists('job_runs');
        Schema::dropIfExists('job_batches');
        Schema::dropIfExists('jobs');
    }
};
