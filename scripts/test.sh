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
# The suite runs three times (TESTING.md, "Three runs"): everything on this
# machine's servers and PHP (Debian 12: MariaDB 10.11, Redis 7.0, PHP 8.2,
# Laravel 8, Symfony 5.4), then the server-facing tests on a Debian 13
# tree's MariaDB 11.8 and Redis 8.0 (with its PHP 8.4, Laravel 10 and
# Symfony 6.4 for the examples), then the Redis-facing ones on its Valkey
# 8.1. scripts/trixie-tree.sh prepares the tree (root; kept between runs,
# made on a machine without it) while the first run runs.
# BINLOG_OUTBOX_TEST_RUNS chooses runs, e.g. "debian12" or "debian13 valkey".
#
# Point the tests at external servers instead (e.g. MySQL 8 from
# docker-compose) with BINLOG_OUTBOX_TEST_MYSQL_DSN and
# BINLOG_OUTBOX_TEST_REDIS_URL; tests that must kill or restart a server skip
# in that mode, and only the first run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=" ${BINLOG_OUTBOX_TEST_RUNS:-debian12 debian13 valkey} "
if [ -n "${BINLOG_OUTBOX_TEST_MYSQL_DSN:-}${BINLOG_OUTBOX_TEST_REDIS_URL:-}" ]; then
	runs=" debian12 "
fi
for r in $runs; do
	case $r in
	debian12 | debian13 | valkey) ;;
	*)
		echo "BINLOG_OUTBOX_TEST_RUNS: unknown run $r (runs: debian12 debian13 valkey)" >&2
		exit 2
		;;
	esac
done
tree_runs=false
case $runs in *" debian13 "* | *" valkey "*) tree_runs=true ;; esac
if $tree_runs && [ "$(id -u)" -ne 0 ]; then
	echo "the Debian 13 runs need root (debootstrap, chroot, mount): run as root, or BINLOG_OUTBOX_TEST_RUNS=debian12 for the first run only" >&2
	exit 1
fi
# The tree is prepared beside the first run: debootstrap waits on the
# network and the disk, the tests on the CPU.
tree_log=$(mktemp)
tree_pid=""
if $tree_runs; then
	scripts/trixie-tree.sh >"$tree_log" 2>&1 &
	tree_pid=$!
fi
finish_tree() {
	if [ -n "$tree_pid" ]; then
		wait "$tree_pid" || true
	fi
	rm -f "$tree_log"
}
trap finish_tree EXIT

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have mariadbd || need+=(mariadb-server)
have mariadb-install-db || need+=(mariadb-server)
have redis-server || need+=(redis-server)
have php || need+=(php-cli)
have promtool || need+=(prometheus)
have systemd-analyze || need+=(systemd)
# TestBench_RedisCallgrind runs the bench's Redis under callgrind.
have callgrind_control || need+=(valgrind)
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
case $runs in *" debian12 "*)
	echo "== debian12: every test on this machine's servers and PHP"
	# shellcheck disable=SC2086 # the package list splits on purpose
	go test -race -timeout 30m -p 4 "$@" "${first[@]}" $rest
	;;
esac
$tree_runs || exit 0

if ! wait "$tree_pid"; then
	tree_pid=""
	echo "preparing the Debian 13 tree failed:" >&2
	cat "$tree_log" >&2
	exit 1
fi
tree_pid=""
tree=$(tail -n 1 "$tree_log")

# What the second and third runs run: the minimum of issue 43 (the
# conformance suite, exactly once under kills and faults, huge transactions
# and their resume, repair, status, Cluster and Sentinel) and the tests of
# what these versions changed (MariaDB 11.4's end_log_pos 0, Redis 7.2's
# CLIENT SETINFO and Redis 8's words under ACLs); the rest of the suite
# tests the relay's own logic, the same on every server. TESTING.md lists
# them.
both='TestReader_Conformance|TestReader_ExactlyOnceUnderAppendFaults|TestReader_LargeTransactionInChunks'
both+='|TestAppendMulti_Conformance|TestSink_MultiRefusedCommandWritesNothing'
both+='|TestRun_ZeroEndLogPos|TestRun_KilledRepeatedlyDuringLoadExactlyOnce|TestRun_StandbyTakesOverExactlyOnce'
both+='|TestRepair_PurgedBinlogUnderLoad|TestRepair_ExitCodes|TestRepair_RedisCluster|TestRepair_ClusterPositionSetMidRun'
both+='|TestStatus_.*|TestRedisACL|TestSentinel_Commands|TestRun_SentinelMasterKilledUnderLoad'
both+='|TestRun_RedisClusterKilledExactlyOnce|TestRun_RedisClusterFailoverNoLoss'
# The relay's state: what a dump from a GTID set starts with, the scripts'
# replies for keys of another type, a lost position repaired.
both+='|TestRun_IdleRestartKeepsThePosition|TestRun_KeysInTheStreamsNamespace|TestRun_LostPositionRefusedThenRepaired'
# The second run adds poll mode's conformance (MariaDB's SKIP LOCKED), the
# rest of repair's tests, and the PHP examples on PHP 8.4, Laravel 10.48
# and Symfony 6.4.
debian13="$both|TestPoller_Conformance|TestRepair_.*|TestReader_MariaDBCompressedBinlog"
debian13+='|TestCheckFilePoint|TestServer_CheckGTIDPoint|TestRun_RefusesAPurgedPosition|TestRun_RefusesAStoredPositionTheServerCannotResume'
debian13+='|TestLaravel.*|TestComposer.*|TestSymfony.*|TestPHPExamples|TestParse_AgreesWithPHPDotenv'
debian13_pkgs=(cmd/binlog-outbox canal redisstream poller examples admin internal/dotenv mysqlserver)
valkey_pkgs=(cmd/binlog-outbox canal redisstream admin)
versions=$(chroot "$tree" env PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c 'printf "MariaDB %s, Redis %s, Valkey %s, PHP %s, Laravel %s" \
	"$(mariadbd --version | sed "s/.*Ver \([^ -]*\).*/\1/")" \
	"$(redis-server --version | sed "s/.* v=\([^ ]*\).*/\1/")" \
	"$(valkey-server --version | sed "s/.* v=\([^ ]*\).*/\1/")" \
	"$(php -r "echo PHP_VERSION;")" \
	"$(sed -n "s/.*const VERSION = .\([0-9.]*\).*/\1/p" /usr/share/php/Illuminate/Foundation/Application.php)"')
echo "== Debian 13 tree $tree: $versions"
case $runs in *" debian13 "*)
	echo "== debian13: the server-facing tests on MariaDB 11.8 and Redis 8.0, the PHP examples on PHP 8.4"
	scripts/trixie-tree.sh run go test -race -timeout 30m -p 4 -run "^($debian13)\$" "$@" "${debian13_pkgs[@]/#/$mod/}"
	;;
esac
case $runs in *" valkey "*)
	echo "== valkey: the Redis-facing tests on Valkey 8.1 (and MariaDB 11.8)"
	BINLOG_OUTBOX_TEST_REDIS=valkey scripts/trixie-tree.sh run go test -race -timeout 30m -p 4 -run "^($both)\$" "$@" "${valkey_pkgs[@]/#/$mod/}"
	;;
esac
