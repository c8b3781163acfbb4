#!/usr/bin/env bash
# Prepares the Debian 13 (trixie) tree whose servers and PHP the suite's
# second and third runs use (scripts/test.sh; TESTING.md, "The Debian 13
# tree"), and prints its path. Needs root (debootstrap, chroot, mount).
#
#   scripts/trixie-tree.sh            # prepare if missing, print the path
#   scripts/trixie-tree.sh run CMD... # run CMD where the tree's servers work
#
# The tree is kept between runs in $BINLOG_OUTBOX_TREE_DIR (default
# /var/cache/binlog-outbox/trixie) and made again on a machine that lacks it.
# BINLOG_OUTBOX_TREE_SUITE makes another Debian release's tree instead (e.g.
# sid, in /var/cache/binlog-outbox/sid), whose packages have the same names;
# `run` runs in any root that has the servers installed.
# Preparing it is idempotent: debootstrap works in DIR.new, which only a
# complete bootstrap renames to DIR (a killed one is removed and started
# over), the packages are installed by apt-get, which a later run completes,
# and DIR/.binlog-outbox-packages records the list once it is installed. A
# lock keeps two runs from preparing it at once.
#
# `run` runs CMD in a private mount namespace in which the temporary
# directory and the repository are mounted at their own paths inside the
# tree, with /proc and /dev, and with BINLOG_OUTBOX_TEST_ROOT naming the
# tree: the test kit then starts its servers chrooted into it
# (testkit/servers/binary.go), and each sees its data directory at the path
# the test gave it. `php` and `composer` in PATH are the tree's, run in the
# current directory. The mounts go away with CMD.
set -euo pipefail

suite=${BINLOG_OUTBOX_TREE_SUITE:-trixie}
dir=${BINLOG_OUTBOX_TREE_DIR:-/var/cache/binlog-outbox/$suite}
mirror=${BINLOG_OUTBOX_TREE_MIRROR:-http://deb.debian.org/debian}
# What the second and third runs use: the servers (MariaDB 11.8, Redis 8.0,
# Valkey 8.1 and their command-line clients) and PHP 8.4 with Laravel 10.48
# and the Symfony 6.4 components the examples use (scripts/test.sh installs
# the same on the machine itself).
packages=(
	mariadb-server mariadb-client redis-server redis-tools valkey-server valkey-tools
	php-cli php-mysql php-redis php-vlucas-phpdotenv php-laravel-framework composer
	php-symfony-messenger php-symfony-redis-messenger php-symfony-serializer
	php-symfony-property-access php-symfony-event-dispatcher php-symfony-doctrine-messenger
	php-doctrine-dbal
)

if [ "$(id -u)" -ne 0 ]; then
	echo "trixie-tree.sh: needs root (debootstrap, chroot and mount)" >&2
	exit 1
fi

# mounted_under fails when anything is mounted at or below $1 in this
# namespace: never remove a tree through a mount of the machine's own /tmp.
mounted_under() {
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# in_tree runs its arguments in a private mount namespace with the
# temporary directory and the repository mounted into the tree.
in_tree() {
	local tmp repo
	tmp=$(realpath "${TMPDIR:-/tmp}")
	repo=$(realpath "$(dirname "$0")/..")
	mkdir -p "$dir$tmp" "$dir$repo"
	exec unshare --mount --propagation private -- sh -euc '
		tree=$1 tmp=$2 repo=$3; shift 3
		mount --rbind "$tmp" "$tree$tmp"
		mount --bind "$repo" "$tree$repo"
		mount -t proc proc "$tree/proc"
		mount --rbind /dev "$tree/dev"
		exec env PATH="$tree.bin:$PATH" BINLOG_OUTBOX_TEST_ROOT="$tree" "$@"' sh "$dir" "$tmp" "$repo" "$@"
}

if [ "${1:-}" = run ]; then
	shift
	if [ ! -d "$dir/usr/bin" ]; then
		echo "trixie-tree.sh: no tree in $dir; prepare it first with scripts/trixie-tree.sh" >&2
		exit 1
	fi
	in_tree "$@"
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9

# The stamp also names this script's layout of what it makes besides the
# packages (the wrappers), so that a change of it is made again.
want=$(printf '%s\n' "layout 4" "${packages[@]}")
if [ -f "$dir/.binlog-outbox-packages" ] && [ "$(cat "$dir/.binlog-outbox-packages")" = "$want" ]; then
	echo "$dir"
	exit 0
fi

if [ ! -d "$dir" ]; then
	if ! command -v debootstrap >/dev/null 2>&1; then
		echo "installing: debootstrap" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
	fi
	if [ -e "$dir.new" ]; then
		if mounted_under "$dir.new"; then
			echo "trixie-tree.sh: $dir.new has mounts below it; unmount them, then run again" >&2
			exit 1
		fi
		echo "removing the unfinished tree $dir.new" >&2
		rm -rf "$dir.new"
	fi
	echo "debootstrap $suite into $dir.new (a few minutes)" >&2
	if ! debootstrap --variant=minbase "$suite" "$dir.new" "$mirror" >"$dir.debootstrap.log" 2>&1; then
		echo "trixie-tree.sh: debootstrap failed; its log:" >&2
		tail -n 30 "$dir.debootstrap.log" >&2
		exit 1
	fi
	mv "$dir.new" "$dir"
fi

# The packages' services never start in the tree: the tests start their own.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"
echo "installing into $dir: ${packages[*]}" >&2
unshare --mount --propagation private -- sh -euc '
	tree=$1; shift
	mount -t proc proc "$tree/proc"
	mount --rbind /dev "$tree/dev"
	export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
	# A run killed during dpkg leaves packages half-configured or
	# dependencies unmet.
	chroot "$tree" dpkg --configure -a
	chroot "$tree" apt-get update -qq
	chroot "$tree" apt-get install -f -y -qq --no-install-recommends
	chroot "$tree" apt-get install -y -qq --no-install-recommends "$@"
	chroot "$tree" apt-get clean' sh "$dir" "${packages[@]}" >"$dir.install.log" 2>&1 || {
	echo "trixie-tree.sh: installing the packages failed; its log:" >&2
	tail -n 30 "$dir.install.log" >&2
	exit 1
}
# mariadb-install-db looks up localhost; minbase writes no /etc/hosts.
[ -s "$dir/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$dir/etc/hosts"
# php and composer of the tree, for the examples' tests: in the current
# directory, which `run` mounts into the tree.
mkdir -p "$dir.bin"
for prog in php composer; do
	cat >"$dir.bin/$prog" <<-EOF
		#!/bin/sh
		# $prog of $dir (scripts/trixie-tree.sh)
		exec chroot $dir /bin/sh -c 'cd "\$0" && exec $prog "\$@"' "\$PWD" "\$@"
	EOF
	chmod 755 "$dir.bin/$prog"
done
printf '%s\n' "$want" >"$dir/.binlog-outbox-packages"
echo "$dir"
