<?php
// autoload.php loads the BinlogOutbox classes of this directory for code
// without Composer (the plain-PHP examples, the test suite's Laravel app on
// Debian's framework). With Composer, composer.json's PSR-4 entry does it.

declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'BinlogOutbox\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
