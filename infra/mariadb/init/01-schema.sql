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
