package main

import (
	"github.com/binlog-outbox/binlog-outbox/lag"
)

// dumperFor reaches the server for the short binlog dumps of lag, as the
// relay's binlog connection does (address, user, password, TLS).
func dumperFor(cfg config, flavor string) lag.Dumper {
	return lag.Dumper{Addr: cfg.MySQL.Addr, User: cfg.MySQL.User, Password: cfg.MySQL.Passwd, TLS: cfg.MySQL.TLS, Flavor: flavor}
}
