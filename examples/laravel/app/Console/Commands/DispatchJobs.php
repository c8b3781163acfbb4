<?php

namespace App\Console\Commands;

use App\Jobs\RecordRun;
use Illuminate\Console\Command;
use Illuminate\Support\Facades\Bus;
use Illuminate\Support\Facades\DB;
use Illuminate\Support\Facades\Queue;
use RuntimeException;

/**
 * DispatchJobs dispatches jobs through the database queue inside the
 * application's transactions, as a web request would with QUEUE_CONNECTION
 * pointing at the jobs table: a plain job, one on the emails queue, a
 * delayed one, a chain and a batch, a job that fails once and one that
 * always fails; every --rollback-every'th round rolls back, and in every
 * round a nested transaction (a savepoint) rolls back a job of its own.
 * It prints one line per job:
 *
 *   committed job message_id=r1-plain
 *   rolled-back job message_id=r3-plain
 */
class DispatchJobs extends Command
{
    protected $signature = 'jobs:dispatch {--rounds=4} {--rollback-every=3} {--tag=r} {--delay=3} {--failing=1}';

    protected $description = 'Dispatch example jobs through the database queue, some of them rolled back';

    public function handle(): int
    {
        $every = (int) $this->option('rollback-every');
        for ($i = 1; $i <= (int) $this->option('rounds'); $i++) {
            $k = $this->option('tag') . $i;
            $rollback = $every > 0 && $i % $every === 0;
            $keys = [];
            $inner = [];
            try {
                DB::transaction(function () use ($k, $i, $rollback, &$keys, &$inner) {
                    $db = Queue::connection('database');
                    $db->push(new RecordRun("$k-plain"));
                    $db->pushOn('emails', new RecordRun("$k-emails"));
                    $delay = (int) $this->option('delay');
                    $db->later($delay, new RecordRun("$k-delayed", 0, time() + $delay));
                    $db->push(new RecordRun("$k-retried", 1));
                    $keys = ["$k-plain", "$k-emails", "$k-delayed", "$k-retried"];
                    if ($i <= (int) $this->option('failing')) {
                        $db->push(new RecordRun("$k-failing", 99));
                        // Never in job_runs: it fails all its tries.
                        $this->line("failing job key=$k-failing");
                    }
                    Bus::chain([new RecordRun("$k-chain-1"), new RecordRun("$k-chain-2")])->onConnection('database')->dispatch();
                    Bus::batch([new RecordRun("$k-batch-1"), new RecordRun("$k-batch-2")])->onConnection('database')->dispatch();
                    array_push($keys, "$k-chain-1", "$k-chain-2", "$k-batch-1", "$k-batch-2");
                    // A savepoint: the nested transaction's job rolls back
                    // with it, the outer one's commit.
                    try {
                        DB::transaction(function () use ($db, $k, &$inner) {
                            $db->push(new RecordRun("$k-savepoint"));
                            $inner[] = "$k-savepoint";
                            throw new RuntimeException('nested transaction rolled back');
                        });
                    } catch (RuntimeException) {
                    }
                    $db->push(new RecordRun("$k-after-savepoint"));
                    $keys[] = "$k-after-savepoint";
                    if ($rollback) {
                        throw new RuntimeException('rolled back');
                    }
                });
            } catch (RuntimeException) {
                foreach ($keys as $key) {
                    $this->line("rolled-back job message_id=$key");
                }
                $keys = [];
            }
            foreach ($keys as $key) {
                $this->line("committed job message_id=$key");
            }
            foreach ($inner as $key) {
                $this->line("rolled-back job message_id=$key");
            }
        }
        return self::SUCCESS;
    }
}
