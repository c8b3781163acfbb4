-- Prepares a MySQL 8 (or MariaDB) server for binlog-outbox. The MySQL image
-- runs it once, as root, when it initialises an empty data directory
-- (docker-compose.yml mounts it into /docker-entrypoint-initdb.d);
-- scripts/demo.sh runs it against its MariaDB. Run it yourself with
--   mysql -uroot -p < deploy/mysql/init.sql
-- after changing the password below.

CREATE DATABASE IF NOT EXISTS app;
USE app;

-- The outbox table exactly as `binlog-outbox schema print` prints it (a test
-- keeps the two equal). Applications insert into it in the transaction of
-- the state change an event announces.
CREATE TABLE /* binlog-outbox */ IF NOT EXISTS `outbox` (
  `id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `message_id` CHAR(26) NOT NULL,
  `aggregate_type` VARCHAR(255) NOT NULL,
  `aggregate_id` VARCHAR(255) NOT NULL,
  `event_type` VARCHAR(255) NOT NULL,
  `schema_version` INT UNSIGNED NULL,
  `payload` JSON NOT NULL,
  `headers` JSON NULL,
  `occurred_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `sent_at` DATETIME(6) NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `outbox_message_id_unique` (`message_id`),
  KEY `outbox_unsent_index` (`sent_at`, `id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The relay's user, with the least it needs:
--   binlog mode: REPLICATION SLAVE (read the binlog), REPLICATION CLIENT
--   (read the current binlog position) and SELECT on the outbox table (check
--   its columns); it never writes to MySQL.
--   poll mode: also UPDATE of sent_at (mark relayed rows), or DELETE with
--   --on-sent delete.
-- REPLICATION privileges exist only globally (ON *.*); they let the user read
-- the binlog of every database of the server, which is why the relay deserves
-- a user of its own. Change the password before production use.
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-secret';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%';
GRANT SELECT, UPDATE (sent_at) ON app.outbox TO 'relay'@'%';
-- GRANT DELETE ON app.outbox TO 'relay'@'%'; -- poll mode with --on-sent delete
