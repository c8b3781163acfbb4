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
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
