<?php
// A PSR-11 container of fixed services: the locators Messenger's senders and
// listeners take, for the scripts that wire Messenger without a framework
// (worker.php, doctrine/).

declare(strict_types=1);

namespace App\Messenger;

use Psr\Container\ContainerInterface;
use Psr\Container\NotFoundExceptionInterface;

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
            throw new class("no service $id") extends \RuntimeException implements NotFoundExceptionInterface {
            };
        }
        return $this->services[$id];
    }

    public function has(string $id): bool
    {
        return isset($this->services[$id]);
    }
}
