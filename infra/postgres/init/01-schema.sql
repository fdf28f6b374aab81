-- The customer database the web site writes and Debezium captures (PostgreSQL). The same
-- columns as MariaDB's demo.customers; re-applying this file is safe.
CREATE TABLE IF NOT EXISTS customers (
    id          SERIAL        PRIMARY KEY,
    first_name  VARCHAR(50),
    last_name   VARCHAR(50),
    email       VARCHAR(100),
    gender      VARCHAR(50),
    club_status VARCHAR(8)    CHECK (club_status IN ('bronze', 'silver', 'gold', 'platinum')),
    region      VARCHAR(50),
    comments    TEXT,
    create_ts   TIMESTAMPTZ   NOT NULL DEFAULT now(),
    update_ts   TIMESTAMPTZ   NOT NULL DEFAULT now()
);

-- MariaDB's ON UPDATE CURRENT_TIMESTAMP, as a trigger.
CREATE OR REPLACE FUNCTION customers_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.update_ts := now();
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS customers_touch ON customers;
CREATE TRIGGER customers_touch BEFORE UPDATE ON customers
    FOR EACH ROW EXECUTE FUNCTION customers_touch();

-- The database clock the job's CDC watermark reads. Debezium's connector runs its
-- heartbeat.action.query (an UPDATE of this row) every heartbeat interval, and the change
-- reaches the customers' CDC topic in commit order with the customer changes
-- (connect/postgres-customers.json), so the watermark moves while customers are quiet.
CREATE TABLE IF NOT EXISTS debezium_heartbeat (
    id SMALLINT     PRIMARY KEY,
    ts TIMESTAMPTZ  NOT NULL DEFAULT now()
);
INSERT INTO debezium_heartbeat (id) VALUES (1) ON CONFLICT (id) DO NOTHING;

-- What logical decoding publishes: the two captured tables, nothing else. Debezium's connector
-- uses it as it is (publication.autocreate.mode=disabled): its user owns no table.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'ratings_customers') THEN
        CREATE PUBLICATION ratings_customers FOR TABLE customers, debezium_heartbeat;
    END IF;
END
$$;
