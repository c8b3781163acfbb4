<?php
// Helpers the PHP examples share: options and connections. The consumer and
// the ULIDs are classes of lib/, which applications can take as they are.

declare(strict_types=1);

require_once __DIR__ . '/lib/autoload.php';

/**
 * options reads --name value / --name=value arguments over defaults; a
 * default may come from an environment variable. Flags without a value
 * (--drain) are true.
 */
function options(array $argv, array $defaults): array
{
    $opts = $defaults;
    for ($i = 1; $i < count($argv); $i++) {
        if (!str_starts_with($argv[$i], '--')) {
            fwrite(STDERR, "unexpected argument {$argv[$i]}\n");
            exit(2);
        }
        $arg = substr($argv[$i], 2);
        if (str_contains($arg, '=')) {
            [$name, $value] = explode('=', $arg, 2);
        } elseif (is_bool($defaults[$arg] ?? null)) {
            [$name, $value] = [$arg, true];
        } else {
            [$name, $value] = [$arg, $argv[++$i] ?? ''];
        }
        if (!array_key_exists($name, $defaults)) {
            fwrite(STDERR, "unknown option --$name; options: --" . implode(', --', array_keys($defaults)) . "\n");
            exit(2);
        }
        $opts[$name] = $value;
    }
    return $opts;
}

function env(string $name, string $default): string
{
    $v = getenv($name);
    return $v === false ? $default : $v; // set but empty is a value (an empty password)
}

/** pdo connects to MySQL with exceptions on, as every example expects. */
function pdo(array $o): PDO
{
    return new PDO($o['dsn'], $o['user'], $o['password'], [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_EMULATE_PREPARES => false,
    ]);
}

/**
 * redisClient connects phpredis as OutboxConsumer needs it: no key prefix, no
 * serializer, and a read timeout that outlasts a blocking XREADGROUP.
 */
function redisClient(array $o): Redis
{
    $redis = new Redis();
    $redis->connect($o['redis-host'], (int) $o['redis-port'], 5.0);
    $redis->setOption(Redis::OPT_READ_TIMEOUT, (string) ((int) ($o['block-ms'] ?? 2000) / 1000 + 10));
    $redis->select((int) $o['redis-db']);
    return $redis;
}
