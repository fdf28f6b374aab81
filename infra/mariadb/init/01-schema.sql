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

-- A quiet database writes no binlog, and Debezium emits heartbeats only as it reads binlog
-- events, so the CDC watermark would stall. This event touches one row every second; Debezium
-- then sends a heartbeat each heartbeat.interval.ms. The table is not captured
-- (table.include.list names only demo.customers) and the event runs with its definer's rights,
-- so the Debezium user needs no write privilege. Needs event_scheduler=ON (my.cnf).
CREATE TABLE IF NOT EXISTS demo.debezium_heartbeat (
    id TINYINT      NOT NULL PRIMARY KEY,
    ts TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
);
INSERT IGNORE INTO demo.debezium_heartbeat (id) VALUES (1);
CREATE EVENT IF NOT EXISTS demo.debezium_heartbeat_tick
    ON SCHEDULE EVERY 1 SECOND
    DO UPDATE demo.debezium_heartbeat SET ts = NOW(3) WHERE id = 1;
