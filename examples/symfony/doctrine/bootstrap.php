<?php
// What producer.php and consumer.php share: Debian's Symfony 5.4 Messenger
// and Doctrine DBAL, the message class, a PSR-11 locator and the DBAL
// connection from the environment (EXAMPLE_DB_HOST, EXAMPLE_DB_PORT,
// EXAMPLE_DB_NAME, EXAMPLE_DB_USER, EXAMPLE_DB_PASSWORD).
declare(strict_types=1);

require_once 'Doctrine/DBAL/autoload.php';
require_once 'Symfony/Component/Messenger/autoload.php';
require_once 'Symfony/Component/Messenger/Bridge/Doctrine/autoload.php';
require_once 'Symfony/Component/Messenger/Bridge/Redis/autoload.php';
require_once 'Symfony/Component/EventDispatcher/autoload.php';
require_once 'Psr/Container/autoload.php';

use Doctrine\DBAL\Connection as DbalConnection;
use Doctrine\DBAL\DriverManager;
use Psr\Container\ContainerInterface;
use Psr\Container\NotFoundExceptionInterface;

/** The message the application dispatches; PhpSerializer carries it whole. */
final class Ping
{
    public string $id;

    public function __construct(string $id)
    {
        $this->id = $id;
    }
}

/** A PSR-11 container of fixed services: the senders SendersLocator takes. */
final class Locator implements ContainerInterface
{
    private array $services;

    public function __construct(array $services)
    {
        $this->services = $services;
    }

    public function get(string $id)
    {
        if (!isset($this->services[$id])) {
            throw new class("no service $id") extends RuntimeException implements NotFoundExceptionInterface {
            };
        }
        return $this->services[$id];
    }

    public function has(string $id): bool
    {
        return isset($this->services[$id]);
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
