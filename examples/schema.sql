-- Tables of the example application that every example shares (PHP, Go, the
-- demo). The outbox table itself comes from `binlog-outbox schema apply` (or
-- `schema print`, or the Laravel migration).
--
--   mariadb app < examples/schema.sql

-- The producer's state: an order changes in the same transaction as the
-- outbox row that announces the change.
CREATE TABLE IF NOT EXISTS orders (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  customer VARCHAR(255) NOT NULL,
  total_cents INT NOT NULL,
  status VARCHAR(32) NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The consumer's inbox: one row per message a consumer group has processed,
-- written in the transaction of the processing itself. Streams deliver at
-- least once (a consumer can crash after its COMMIT and before its XACK); the
-- primary key turns the second delivery into a duplicate-key error, which
-- the consumer acknowledges and skips.
CREATE TABLE IF NOT EXISTS processed_messages (
  consumer_group VARCHAR(191) NOT NULL,
  message_id VARCHAR(64) NOT NULL,
  stream VARCHAR(255) NOT NULL,
  entry_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(255) NOT NULL,
  aggregate_id VARCHAR(255) NOT NULL,
  consumer VARCHAR(255) NOT NULL,
  processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (consumer_group, message_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
