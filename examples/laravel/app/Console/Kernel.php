<?php

namespace App\Console;

use Illuminate\Foundation\Console\Kernel as ConsoleKernel;

/**
 * Kernel lists the application's commands. On Laravel 11 and 12 without this
 * class, commands in app/Console/Commands are found on their own.
 */
class Kernel extends ConsoleKernel
{
    protected $commands = [
        Commands\PlaceOrders::class,
        Commands\DispatchJobs::class,
    ];
}
