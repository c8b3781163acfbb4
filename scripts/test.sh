#!/usr/bin/env bash
# Runs the whole test suite on a Debian/Ubuntu machine, installing what is
# missing first: MariaDB and Redis servers (the tests start private instances
# of them, never the system services), PHP with Laravel and Debian's Symfony
# components for the PHP examples and Laravel's .env parser, composer (to
# validate the Laravel package), and the tools that check the files in deploy/
# (promtool, systemd-analyze).
#
#   scripts/test.sh            # everything: gofmt, go vet, go test -race ./...
#   scripts/test.sh -run X     # extra arguments go to go test
#
# Point the tests at external servers instead (e.g. MySQL 8 from
# docker-compose) with BINLOG_OUTBOX_TEST_MYSQL_DSN and
# BINLOG_OUTBOX_TEST_REDIS_URL; tests that must kill or restart a server skip
# in that mode.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have mariadbd || need+=(mariadb-server)
have mariadb-install-db || need+=(mariadb-server)
have redis-server || need+=(redis-server)
have php || need+=(php-cli)
have promtool || need+=(prometheus)
have systemd-analyze || need+=(systemd)
[ -f /usr/share/php/Dotenv/autoload.php ] || need+=(php-vlucas-phpdotenv)
if have php; then
	php -m 2>/dev/null | grep -qi '^pdo_mysql$' || need+=(php-mysql)
	php -m 2>/dev/null | grep -qi '^redis$' || need+=(php-redis)
else
	need+=(php-mysql php-redis)
fi
# examples/laravel runs on Debian's Laravel 8 (its bootstrap falls back to
# Debian's autoloader when there is no vendor/).
[ -f /usr/share/php/Illuminate/Foundation/Application.php ] || need+=(php-laravel-framework)
# The Symfony Messenger worker of examples/symfony runs on Debian's Symfony.
# examples/symfony_doctrine_test.go adds Messenger's Doctrine transport, on
# Debian's DBAL.
for pkg in messenger redis-messenger serializer property-access event-dispatcher doctrine-messenger; do
	dpkg -s "php-symfony-$pkg" >/dev/null 2>&1 || need+=("php-symfony-$pkg")
done
dpkg -s php-doctrine-dbal >/dev/null 2>&1 || need+=(php-doctrine-dbal)
# composer validates integrations/laravel/composer.json (no Packagist needed).
have composer || need+=(composer)
if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing: ${need[*]}"
	$sudo apt-get update -qq
	# The packages' own services are not needed: the tests start private
	# servers on their own ports. A policy-rc.d that exits 101 ("action
	# forbidden") keeps invoke-rc.d and deb-systemd-invoke from starting
	# them (Prometheus on :9090, MariaDB, Redis) during the install; an
	# existing one is put back afterwards.
	policy=/usr/sbin/policy-rc.d saved=""
	if $sudo test -e "$policy"; then
		saved=$(mktemp)
		$sudo cp -p "$policy" "$saved"
	fi
	restore_policy() {
		if [ -n "$saved" ]; then
			$sudo cp -p "$saved" "$policy" && rm -f "$saved"
		else
			$sudo rm -f "$policy"
		fi
	}
	trap restore_policy EXIT
	printf '#!/bin/sh\n# scripts/test.sh: no services start while it installs.\nexit 101\n' | $sudo tee "$policy" >/dev/null
	$sudo chmod 755 "$policy"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	restore_policy
	trap - EXIT
fi

if ! command -v go >/dev/null 2>&1; then
	echo "go is not installed: install Go 1.26 or newer (https://go.dev/dl/) and run again" >&2
	exit 1
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt: these files are not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# The packages whose tests take longest start first, so that none of them
# is left running alone at the end; the rest fill in beside them. Four at a
# time keep two cores busy while tests wait on servers and on each other
# (two, go test's default on such a machine, left a fifth of the CPU idle;
# TESTING.md has the figures).
mod=$(go list -m)
slow=(cmd/binlog-outbox canal redisstream poller examples cmd/binlog-outbox-bench admin)
first=() skip=()
for p in "${slow[@]}"; do
	first+=("$mod/$p")
	skip+=(-e "$mod/$p")
done
rest=$(go list ./... | grep -vxF "${skip[@]}" || true)
# shellcheck disable=SC2086 # the package list splits on purpose
go test -race -timeout 30m -p 4 "$@" "${first[@]}" $rest
