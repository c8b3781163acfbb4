<?php

// autoload.php loads Composer's autoloader when the application was
// installed with `composer install` (Laravel 10 to 12 from Packagist). Without
// vendor/, it runs on Debian's Laravel 8 (apt-get install
// php-laravel-framework), as the test suite does: Debian's autoloader for the
// framework, the package binlog-outbox/laravel from ../../integrations/laravel,
// and the app's own classes.

if (is_file(__DIR__ . '/../vendor/autoload.php')) {
    require __DIR__ . '/../vendor/autoload.php';
    return;
}

$debian = '/usr/share/php/Illuminate/autoload.php';
if (!is_file($debian)) {
    fwrite(STDERR, "no vendor/autoload.php and no $debian: run `composer install` here, "
        . "or `apt-get install php-laravel-framework` for Debian's Laravel 8\n");
    exit(1);
}
require $debian;
require __DIR__ . '/../../../integrations/laravel/autoload.php';

spl_autoload_register(static function (string $class): void {
    // composer.json's PSR-4 entry.
    if (str_starts_with($class, 'App\\')) {
        $file = __DIR__ . '/../app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
