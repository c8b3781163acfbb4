CREATE TABLE /* binlog-outbox */ IF NOT EXISTS `app events` (
  `outbox id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `aggregate_id` VARCHAR(255) NOT NULL,
  `type` VARCHAR(255) NOT NULL,
  `it's` JSON NOT NULL,
  `created_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  `sent_at` DATETIME(6) NULL,
  PRIMARY KEY (`outbox id`),
  KEY `outbox_unsent_index` (`sent_at`, `outbox id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
