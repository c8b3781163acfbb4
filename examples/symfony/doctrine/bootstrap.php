<?php
// What producer.php and consumer.php share: Debian's Symfony 5.4 Messenger
// and Doctrine DBAL, the message class, the PSR-11 Locator of ../src and the DBAL
// connection from the environment (EXAMPLE_DB_HOST, EXAMPLE_DB_PORT,
// EXAMPLE_DB_NAME, EXAMPLE_DB_USER, EXAMPLE_DB_PASSWORD).
declare(strict_types=1);

require_once 'Doctrine/DBAL/autoload.php';
require_once 'Symfony/Component/Messenger/autoload.php';
require_once 'Symfony/Component/Messenger/Bridge/Doctrine/autoload.php';
require_once 'Symfony/Component/Messenger/Bridge/Redis/autoload.php';
require_once 'Symfony/Component/EventDispatcher/autoload.php';
require_once 'Psr/Container/autoload.php';
require_once __DIR__ . '/../src/Messenger/Locator.php';

use Doctrine\DBAL\Connection as DbalConnection;
use Doctrine\DBAL\DriverManager;

/** The message the application dispatches; PhpSerializer carries it whole. */
final class Ping
{
    public string $id;

    public function __construct(string $id)
    {
        $this->id = $id;
    }
}

function dbal(): DbalConnection
{
    $env = fn (string $k, string $d = ''): string => getenv($k) === false ? $d : (string) getenv($k);
    return DriverManager::getConnection([
        'driver' => 'pdo_mysql',
        'host' => $env('EXAMPLE_DB_HOST', '127.0.0.1'),
        'port' => (int) $env('EXAMPLE_DB_PORT', '3306'),
        'dbname' => $env('EXAMPLE_DB_NAME', 'app'),
        'user' => $env('EXAMPLE_DB_USER', 'root'),
        'password' => $env('EXAMPLE_DB_PASSWORD'),
    ]);
}
