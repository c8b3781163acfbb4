<?php

namespace App\Jobs;

use Illuminate\Bus\Batchable;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Support\Facades\DB;
use RuntimeException;

/**
 * RecordRun is an ordinary Laravel job, dispatched through the database
 * queue inside the application's transaction (jobs:dispatch) and run by
 * whatever worker the relay delivers it to: it writes a job_runs row in a
 * transaction of its own. Its first $failFirst attempts throw, before it
 * writes anything, so that Laravel retries it after the backoff; a job that
 * fails all its tries lands in failed_jobs.
 */
class RecordRun implements ShouldQueue
{
    use Batchable, Dispatchable, InteractsWithQueue, Queueable;

    public $tries = 3;

    public $backoff = 1;

    public function __construct(public string $key, public int $failFirst = 0, public int $notBefore = 0)
    {
    }

    public function handle(): void
    {
        if ($this->attempts() <= $this->failFirst) {
            throw new RuntimeException("job {$this->key} fails its attempt {$this->attempts()}");
        }
        DB::transaction(function () {
            DB::table('job_runs')->insert([
                'job_key' => $this->key,
                'attempt' => $this->attempts(),
                'queue' => $this->job->getQueue(),
                'connection' => $this->job->getConnectionName(),
                'batch_id' => $this->batchId,
                'not_before' => $this->notBefore,
                'ran_at' => microtime(true),
            ]);
        });
    }
}
