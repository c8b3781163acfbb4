<?php
// Helpers the PHP examples share: options, connections, ULIDs.

declare(strict_types=1);

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
 * ulid returns a ULID (https://github.com/ulid/spec): 48 bits of Unix time
 * in milliseconds and 80 random bits in Crockford's base32, 26 characters
 * that sort by time. Use a library (symfony/uid, ramsey/uuid) in an
 * application; this shows there is no magic in it.
 */
function ulid(): string
{
    $alphabet = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    $ms = (int) floor(microtime(true) * 1000);
    $time = '';
    for ($i = 0; $i < 10; $i++) { // 10 characters of 5 bits hold the 48 bits
        $time = $alphabet[$ms % 32] . $time;
        $ms = intdiv($ms, 32);
    }
    $bits = '';
    foreach (str_split(random_bytes(10)) as $byte) { // 80 bits: 16 characters
        $bits .= str_pad(decbin(ord($byte)), 8, '0', STR_PAD_LEFT);
    }
    $random = '';
    foreach (str_split($bits, 5) as $chunk) {
        $random .= $alphabet[bindec($chunk)];
    }
    return $time . $random;
}
