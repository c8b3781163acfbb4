#!/usr/bin/env bash
# binlog-outbox in a minute, on this machine, without Docker.
#
#   scripts/demo.sh              # run the demo, leave it running until Ctrl-C
#   scripts/demo.sh --headless   # run it to the end and exit; non-zero on any failure
#   scripts/demo.sh --keep       # keep the servers' data in .demo/ after Ctrl-C
#
# It installs MariaDB and Redis when they are missing (apt-get, as root or
# with sudo; Go must be installed already), starts PRIVATE servers in .demo/
# on ports of their own (the system services are not used, nor touched),
# creates the outbox table, builds and starts the relay, places orders of
# which some are rolled back on purpose, consumes the events with a consumer
# group, and checks that every committed event arrived exactly once and no
# rolled-back one at all.
#
# Environment: DEMO_HEADLESS=1 (as --headless), DEMO_DIR (default .demo),
# DEMO_MYSQL_PORT (default 33306), DEMO_REDIS_PORT (default 36379),
# DEMO_ORDERS (default 12), DEMO_KEEP=1 (as --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PATH="$PATH:/usr/sbin:/usr/local/sbin:/sbin"

HEADLESS=${DEMO_HEADLESS:-0}
KEEP=${DEMO_KEEP:-0}
for arg in "$@"; do
	case $arg in
	--headless) HEADLESS=1 ;;
	--keep) KEEP=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "unknown argument: $arg (try --help)" >&2
		exit 2
		;;
	esac
done

DEMO=${DEMO_DIR:-$REPO/.demo}
MYSQL_PORT=${DEMO_MYSQL_PORT:-33306}
REDIS_PORT=${DEMO_REDIS_PORT:-36379}
ORDERS=${DEMO_ORDERS:-12}
ROLLBACK_EVERY=4
STREAM=outbox:order
GROUP=billing

RELAY_DSN="relay:relay-secret@tcp(127.0.0.1:$MYSQL_PORT)/app"
APP_DSN="app:app@tcp(127.0.0.1:$MYSQL_PORT)/app"
ROOT_DSN="root@tcp(127.0.0.1:$MYSQL_PORT)/app"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"

if [ -t 1 ]; then
	B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' Y=$'\e[33m' N=$'\e[0m'
else
	B="" G="" R="" Y="" N=""
fi
step() { printf '\n%s==> %s%s\n' "$B" "$*" "$N"; }
info() { printf '    %s\n' "$*"; }
indent() { sed 's/^/    /'; }
fail() {
	printf '%sDEMO FAILED: %s%s\n' "$R" "$*" "$N" >&2
	exit 1
}

# ---------------------------------------------------------------- cleanup
pids=()
cleanup() {
	local code=$?
	trap - EXIT INT TERM
	if [ ${#pids[@]} -gt 0 ]; then
		echo
		echo "stopping the demo's relay, Redis and MariaDB ..."
		# Reverse start order: the relay first, MariaDB last.
		for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
			kill -TERM "${pids[i]}" 2>/dev/null || true
			for _ in $(seq 1 100); do
				kill -0 "${pids[i]}" 2>/dev/null || break
				sleep 0.2
			done
			kill -KILL "${pids[i]}" 2>/dev/null || true
		done
		rm -f "$DEMO"/*.pid
	fi
	if [ "$KEEP" = 1 ]; then
		echo "data and logs kept in $DEMO"
	elif [ -d "$DEMO" ]; then
		rm -rf "$DEMO/mysql" "$DEMO/redis"
		[ "$code" = 0 ] || echo "logs kept in $DEMO/logs"
	fi
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_bg LOG CMD... starts a server in the background and remembers its pid.
start_bg() {
	local log=$1 name
	shift
	name=$(basename "$1")
	"$@" >>"$log" 2>&1 &
	pids+=($!)
	echo $! >"$DEMO/$name.pid"
}

# wait_until SECONDS WHAT CMD... retries CMD until it succeeds.
wait_until() {
	local secs=$1 what=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- 1. prerequisites
step "1/8 checking prerequisites"
if ! have go; then
	fail "Go is not installed. Install Go 1.26 or newer from https://go.dev/dl/, e.g.
    curl -fsSL https://go.dev/dl/go1.26.0.linux-amd64.tar.gz | sudo tar -C /usr/local -xz
    export PATH=\$PATH:/usr/local/go/bin
and run $0 again."
fi
need=()
have mariadbd || need+=(mariadb-server)
have mariadb-install-db || need+=(mariadb-server)
have mariadb || need+=(mariadb-client)
have redis-server || need+=(redis-server)
have redis-cli || need+=(redis-tools)
if [ ${#need[@]} -gt 0 ]; then
	have apt-get || fail "missing: ${need[*]}; this script installs them with apt-get (Debian/Ubuntu) only: install them yourself and run it again"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		have sudo || fail "missing: ${need[*]}; run as root or install sudo"
		sudo=sudo
	fi
	mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
	info "installing ${need[*]} (the demo does not use their system services)"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
info "go: $(go version | cut -d' ' -f3), mariadb $(mariadbd --version | sed 's/.*Ver \([^ ]*\).*/\1/'), redis $(redis-server --version | cut -d' ' -f3)"

# A previous run that was killed (kill -9 of this script) may have left its
# servers behind: stop the ones whose pid files are ours.
for f in "$DEMO"/*.pid; do
	[ -e "$f" ] || continue
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		info "stopping $(basename "$f" .pid) (pid $pid) left over from a previous run"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	fi
	rm -f "$f"
done
port_free "$MYSQL_PORT" || fail "port $MYSQL_PORT is in use; pick another with DEMO_MYSQL_PORT=..."
port_free "$REDIS_PORT" || fail "port $REDIS_PORT is in use; pick another with DEMO_REDIS_PORT=..."
rm -rf "$DEMO/mysql" "$DEMO/redis" "$DEMO/logs" "$DEMO/bin"
mkdir -p "$DEMO/mysql/tmp" "$DEMO/redis" "$DEMO/logs" "$DEMO/bin"

# ---------------------------------------------------------------- 2. MariaDB
step "2/8 starting a private MariaDB on 127.0.0.1:$MYSQL_PORT (binlog on, ROW format, data in $DEMO/mysql)"
user=$(id -un) # as root, mariadbd refuses to start without --user=root
mariadb-install-db --no-defaults --datadir="$DEMO/mysql/data" --tmpdir="$DEMO/mysql/tmp" \
	--auth-root-authentication-method=normal --skip-test-db --user="$user" >"$DEMO/logs/mariadb-install.log" 2>&1 ||
	fail "mariadb-install-db failed: see $DEMO/logs/mariadb-install.log"
# The settings the relay needs: the binlog in ROW format with full row images
# and column names (binlog_row_metadata=FULL), and a server id; sync_binlog=1
# (MariaDB's default is 0) so that an OS crash cannot take back a transaction
# the relay appended.
start_bg "$DEMO/logs/mariadb.log" "$(command -v mariadbd)" --no-defaults --user="$user" \
	--datadir="$DEMO/mysql/data" --tmpdir="$DEMO/mysql/tmp" \
	--socket="$DEMO/mysql/mysqld.sock" --pid-file="$DEMO/mysql/mysqld.pid" \
	--port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
	--log-error="$DEMO/logs/mariadb.log" \
	--log-bin=mysql-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL --server-id=1 --sync-binlog=1 \
	--innodb-buffer-pool-size=64M --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci
mysql_root() { mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$MYSQL_PORT" -uroot "$@"; }
wait_until 60 "MariaDB" mysql_root -e 'SELECT 1' ||
	fail "MariaDB did not start; last lines of $DEMO/logs/mariadb.log:
$(tail -n 15 "$DEMO/logs/mariadb.log")"
info "up: $(mysql_root -N -e "SELECT CONCAT(VERSION(), ', binlog_format=', @@binlog_format, ', binlog_row_image=', @@binlog_row_image)")"

# ---------------------------------------------------------------- 3. Redis
step "3/8 starting a private Redis on 127.0.0.1:$REDIS_PORT (AOF on, data in $DEMO/redis)"
start_bg "$DEMO/logs/redis.log" "$(command -v redis-server)" --port "$REDIS_PORT" --bind 127.0.0.1 \
	--dir "$DEMO/redis" --appendonly yes --appendfsync everysec --save "" --daemonize no --protected-mode no
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
wait_until 30 "Redis" rcli SET demo:ready 1 ||
	fail "Redis did not start; see $DEMO/logs/redis.log"
rcli DEL demo:ready >/dev/null
info "up: redis $(rcli INFO server | tr -d '\r' | sed -n 's/^redis_version://p')"

# ---------------------------------------------------------------- 4. build
step "4/8 building the relay and the example producer and consumer (go build)"
go build -o "$DEMO/bin/binlog-outbox" ./cmd/binlog-outbox
go build -o "$DEMO/bin/go-producer" ./examples/go-producer
go build -o "$DEMO/bin/go-consumer" ./examples/go-consumer
BO="$DEMO/bin/binlog-outbox"
info "built into $DEMO/bin"

# ---------------------------------------------------------------- 5. tables, users, check
step "5/8 creating the outbox table and the relay's least-privilege user"
mysql_root -e "CREATE DATABASE app; CREATE USER 'app'@'%' IDENTIFIED BY 'app'; GRANT ALL ON app.* TO 'app'@'%';"
info "\$ binlog-outbox schema apply"
BINLOG_OUTBOX_MYSQL_DSN=$ROOT_DSN "$BO" --log-level warn schema apply 2>&1 | indent
info "\$ mysql < deploy/mysql/init.sql   # user relay: REPLICATION SLAVE, REPLICATION CLIENT, SELECT on app.outbox"
mysql_root <deploy/mysql/init.sql
mysql_root app <examples/schema.sql
info "the example's own tables: orders (state) and processed_messages (the consumer's inbox)"

export BINLOG_OUTBOX_MYSQL_DSN=$RELAY_DSN BINLOG_OUTBOX_REDIS_URL=$REDIS_URL
info "\$ binlog-outbox check --mode binlog"
"$BO" check --mode binlog --timeout 20s 2>&1 | indent || fail "binlog-outbox check failed (see above for the fixes)"

# ---------------------------------------------------------------- 6. relay
step "6/8 starting the relay in binlog mode (log: $DEMO/logs/relay.log)"
start_bg "$DEMO/logs/relay.log" "$BO" --log-format json --server-id 1001 run --mode binlog
RELAY_PID=${pids[-1]}
POSITION_KEY=binlog-outbox:position:app.outbox
position_stored() { [ "$(rcli EXISTS "$POSITION_KEY")" = 1 ]; }
wait_until 30 "the relay" position_stored ||
	fail "the relay stored no position within 30 s; last lines of $DEMO/logs/relay.log:
$(tail -n 15 "$DEMO/logs/relay.log")"
info "running (pid $RELAY_PID); its binlog position is in Redis: $(rcli GET "$POSITION_KEY" | cut -c1-80)"

# ---------------------------------------------------------------- 7. produce
step "7/8 placing $ORDERS orders: each order and its events in ONE transaction"
info "every ${ROLLBACK_EVERY}th transaction is ROLLED BACK ON PURPOSE: its events must never reach Redis"
"$DEMO/bin/go-producer" --mysql-dsn "$APP_DSN" --orders "$ORDERS" --rollback-every "$ROLLBACK_EVERY" >"$DEMO/produced.txt" ||
	fail "the producer failed"
sed -e 's/^rolled-back \(.*\)$/rolled-back \1   <- rolled back on purpose/' "$DEMO/produced.txt" | indent
committed=$(grep -c '^committed ' "$DEMO/produced.txt" || true)
rolledback=$(grep -c '^rolled-back ' "$DEMO/produced.txt" || true)
delivered() { [ "$(rcli XLEN "$STREAM")" -ge "$committed" ]; }
wait_until 20 "delivery" delivered ||
	fail "$STREAM has $(rcli XLEN "$STREAM") entries after 20 s, want $committed; see $DEMO/logs/relay.log"

# ---------------------------------------------------------------- 8. consume
step "8/8 reading the stream with consumer groups"
rcli XGROUP CREATE "$STREAM" terminal 0 >/dev/null
info "\$ redis-cli XREADGROUP GROUP terminal me COUNT 1 STREAMS $STREAM '>'"
rcli XREADGROUP GROUP terminal me COUNT 1 STREAMS "$STREAM" '>' | indent
info "the consumer in examples/go-consumer, group $GROUP: each entry in a DB transaction that"
info "records its message_id in processed_messages, XACK after COMMIT:"
"$DEMO/bin/go-consumer" --mysql-dsn "$APP_DSN" --redis-url "$REDIS_URL" --stream "$STREAM" --group "$GROUP" \
	--consumer billing-1 --drain 2>"$DEMO/logs/consumer.log" | indent || fail "the consumer failed; see $DEMO/logs/consumer.log"

# ---------------------------------------------------------------- verify
ids() { sed -n 's/.*message_id=\([0-9A-Z]*\).*/\1/p'; }
grep '^committed ' "$DEMO/produced.txt" | ids | sort >"$DEMO/committed.ids"
grep '^rolled-back ' "$DEMO/produced.txt" | ids | sort >"$DEMO/rolledback.ids"
# redis-cli --raw prints an entry's fields and values one per line.
rcli --raw XRANGE "$STREAM" - + | awk 'prev == "message_id" { print } { prev = $0 }' | sort >"$DEMO/stream.ids"
mysql_root -N app -e "SELECT message_id FROM processed_messages WHERE consumer_group = '$GROUP'" | sort >"$DEMO/processed.ids"

echo
echo "${B}checking what arrived against what was committed${N}"
problems=0
check() { # check OK MESSAGE
	if [ "$1" = ok ]; then
		printf '    %sPASS%s  %s\n' "$G" "$N" "$2"
	else
		printf '    %sFAIL%s  %s\n' "$R" "$N" "$2"
		problems=$((problems + 1))
	fi
}
n_stream=$(wc -l <"$DEMO/stream.ids")
n_processed=$(wc -l <"$DEMO/processed.ids")
dups=$(uniq -d "$DEMO/stream.ids" | wc -l)
rb_in_stream=$(comm -12 "$DEMO/rolledback.ids" "$DEMO/stream.ids" | wc -l)
rb_processed=$(comm -12 "$DEMO/rolledback.ids" "$DEMO/processed.ids" | wc -l)
[ "$committed" -gt 0 ] && [ "$rolledback" -gt 0 ] && r=ok || r=no
check $r "the producer committed $committed events and rolled back $rolledback"
cmp -s "$DEMO/committed.ids" "$DEMO/stream.ids" && r=ok || r=no
check $r "$STREAM holds $n_stream entries: every committed event, $dups twice (exactly once)"
[ "$rb_in_stream" = 0 ] && r=ok || r=no
check $r "rolled-back events in the stream: $rb_in_stream of $rolledback ($(tr '\n' ' ' <"$DEMO/rolledback.ids"| cut -c1-60)...)"
cmp -s "$DEMO/committed.ids" "$DEMO/processed.ids" && r=ok || r=no
check $r "group $GROUP processed $n_processed events, each once (processed_messages)"
[ "$rb_processed" = 0 ] && r=ok || r=no
check $r "rolled-back events processed: $rb_processed"
pending=$(rcli XPENDING "$STREAM" "$GROUP" | head -n 1)
[ "$pending" = 0 ] && r=ok || r=no
check $r "entries pending (read, not acknowledged) in group $GROUP: $pending"
if [ "$problems" -gt 0 ]; then
	fail "$problems check(s) failed; logs in $DEMO/logs"
fi
echo "${G}DEMO OK${N}: $committed committed events delivered exactly once, $rolledback rolled-back events never delivered"

# ---------------------------------------------------------------- next
cat >"$DEMO/env.sh" <<EOF
# source $DEMO/env.sh: the demo's servers for binlog-outbox and the examples
export BINLOG_OUTBOX_MYSQL_DSN='$RELAY_DSN'
export BINLOG_OUTBOX_REDIS_URL='$REDIS_URL'
export EXAMPLE_MYSQL_DSN='$APP_DSN'
export EXAMPLE_REDIS_URL='$REDIS_URL'
# for examples/php
export EXAMPLE_PDO_DSN='mysql:host=127.0.0.1;port=$MYSQL_PORT;dbname=app' EXAMPLE_DB_USER=app EXAMPLE_DB_PASSWORD=app
export EXAMPLE_REDIS_HOST=127.0.0.1 EXAMPLE_REDIS_PORT=$REDIS_PORT EXAMPLE_REDIS_DB=0
export PATH="$DEMO/bin:\$PATH"
alias demo-mysql='mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P$MYSQL_PORT -uroot app'
alias demo-redis='redis-cli -h 127.0.0.1 -p $REDIS_PORT'
EOF
if [ "$HEADLESS" = 1 ]; then
	exit 0
fi
cat <<EOF

${B}What to try next${N} (in another terminal; the servers and the relay keep running here):

    source $DEMO/env.sh
    go-producer --orders 5                        # more orders, some rolled back
    demo-redis XRANGE $STREAM - + COUNT 2         # the entries and their fields
    demo-redis XINFO GROUPS $STREAM               # the groups, their lag and pending counts
    demo-redis XPENDING $STREAM terminal          # the entry read above and never acknowledged
    go-consumer --group $GROUP --drain            # consume the new ones; duplicates are skipped
    demo-mysql -e 'SELECT * FROM processed_messages ORDER BY processed_at DESC LIMIT 5'

  Kill the relay and watch it resume where it stopped, nothing lost, nothing twice:

    kill -9 $RELAY_PID
    go-producer --orders 5                        # written while no relay runs
    binlog-outbox position show                   # where the relay will resume
    binlog-outbox run --mode binlog 2>relay.log & # catches up and keeps relaying
    go-consumer --group $GROUP --drain

  Run the PHP examples (apt-get install php-cli php-mysql php-redis); the relay
  started above relays their events (stop it with kill %1 when done):

    php examples/php/producer.php --orders 3
    php examples/php/consumer.php --group php-billing --drain

  Logs: $DEMO/logs. Press ${Y}Ctrl-C${N} to stop the servers and delete their data (--keep keeps it).
EOF
while true; do sleep 1; done
