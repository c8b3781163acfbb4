package redisstream

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// aclCheckLua defines deny(cmd, sub, key, ...), which a script calls before
// its first write for each command it is going to run (Redis itself checks
// the script's KEYS before running it, but not the commands it calls on
// them): a command the user's ACL
// refuses half-way through a script would leave some entries appended
// without the position that covers them (appended twice on the retry), or
// a dedupe key set for an entry that was never appended (lost on the
// retry). It returns nil when the command is allowed, and otherwise a
// NOPERM error naming the command, the key and the ACL fix. Redis before
// 7.0 has no redis.acl_check_cmd; there the script learns of a refusal
// when it runs the command.
const aclCheckLua = `
local function deny(cmd, sub, key, ...)
  if not redis.acl_check_cmd then return nil end
  local ok
  if sub == '' then
    ok = redis.acl_check_cmd(cmd, key, ...)
  else
    ok = redis.acl_check_cmd(cmd, sub, key, ...)
  end
  if ok then return nil end
  local name, rule = cmd, '+' .. string.lower(cmd)
  if sub ~= '' then
    name, rule = cmd .. ' ' .. sub, rule .. '|' .. string.lower(sub)
  end
  return redis.error_reply('NOPERM the Redis user may not run ' .. name .. ' on ' .. key ..
    ': grant it ' .. rule .. ' and a key pattern matching ' .. key)
end
`

// uncertain reports whether err leaves open whether Redis ran the command: the
// request may have been written before the connection broke.
func uncertain(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false // Redis answered with an error: it did not run the script
	}
	return !errors.Is(err, redis.ErrClosed)
}
