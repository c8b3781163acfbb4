<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use Illuminate\Support\Str;

/**
 * Ulid makes message ids (https://github.com/ulid/spec): 48 bits of Unix
 * time in milliseconds and 80 random bits in Crockford's base32, 26
 * characters that sort by time. Laravel 9+ has Str::ulid(), used when there;
 * Laravel 8 has neither it nor symfony/uid, so the package makes its own.
 */
final class Ulid
{
    private const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

    public static function generate(): string
    {
        if (method_exists(Str::class, 'ulid')) {
            return (string) Str::ulid();
        }
        $ms = (int) floor(microtime(true) * 1000);
        $time = '';
        for ($i = 0; $i < 10; $i++) { // 10 characters of 5 bits hold the 48 bits
            $time = self::ALPHABET[$ms % 32] . $time;
            $ms = intdiv($ms, 32);
        }
        $bits = '';
        foreach (str_split(random_bytes(10)) as $byte) { // 80 bits: 16 characters
            $bits .= str_pad(decbin(ord($byte)), 8, '0', STR_PAD_LEFT);
        }
        $random = '';
        foreach (str_split($bits, 5) as $chunk) {
            $random .= self::ALPHABET[bindec($chunk)];
        }
        return $time . $random;
    }
}
