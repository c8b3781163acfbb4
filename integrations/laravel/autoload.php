<?php
// autoload.php loads the package's classes for an application without
// Composer (the test suite's Laravel app on Debian's framework). With
// Composer, composer.json's PSR-4 entry does it.

declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'BinlogOutbox\\Laravel\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
