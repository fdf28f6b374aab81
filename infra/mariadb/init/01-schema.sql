-- The customer database the web site writes and Debezium captures.
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;

CREATE TABLE IF NOT EXISTS demo.customers (
    id          INT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    first_name  VARCHAR(50),
    last_name   VARCHAR(50),
    email       VARCHAR(100),
    gender      VARCHAR(50),
    club_status VARCHAR(8)   CHECK (club_status IN ('bronze', 'silver', 'gold', 'platinum')),
    region      VARCHAR(50),
    comments    VARCHAR(1000),
    create_ts   TIMESTAMP    NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_ts   TIMESTAMP    NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP
);

-- A quiet database writes no binlog, so Debezium would send nothing and the job could not tell
-- "no change" from "not delivered yet". This event touches one row ten times a second (the
-- scheduler's finest interval is a second, so each run ticks ten times, 100 ms apart). Debezium
-- captures it and routes it into the customers' CDC topic (connect/mariadb-customers.json), so
-- the topic carries, in binlog order, a database clock reading (ts, in milliseconds) every 100
-- ms: the job's CDC watermark, and the finest step by which it can release ratings.
-- The event runs with its definer's rights: the Debezium user writes nothing. Needs
-- event_scheduler=ON (my.cnf).
CREATE TABLE IF NOT EXISTS demo.debezium_heartbeat (
    id TINYINT      NOT NULL PRIMARY KEY,
    ts TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
);
INSERT IGNORE INTO demo.debezium_heartbeat (id) VALUES (1);
-- Kept out of the binlog: Debezium's DDL parser cannot read a compound event body, and the
-- event is an operational object of this server, not data to replicate.
SET SESSION sql_log_bin = 0;
DELIMITER //
CREATE OR REPLACE EVENT demo.debezium_heartbeat_tick
    ON SCHEDULE EVERY 1 SECOND
    DO BEGIN
        DECLARE tick INT DEFAULT 0;
        WHILE tick < 10 DO
            UPDATE demo.debezium_heartbeat SET ts = NOW(3) WHERE id = 1;
            SET tick = tick + 1;
            IF tick < 10 THEN
                DO SLEEP(0.1);
            END IF;
        END WHILE;
    END//
DELIMITER ;
SET SESSION sql_log_bin = 1;
