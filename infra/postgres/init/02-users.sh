#!/bin/sh
# Docker path only: the official PostgreSQL image runs this once on a new data volume, after
# 01-schema.sql, in the database demo. It fills the user template from the container's
# environment and applies it.
set -eu
: "${DEBEZIUM_DB_PASSWORD:?set DEBEZIUM_DB_PASSWORD}" "${APP_DB_PASSWORD:?set APP_DB_PASSWORD}"
sed -e "s/\${DEBEZIUM_DB_PASSWORD}/${DEBEZIUM_DB_PASSWORD}/g" \
    -e "s/\${APP_DB_PASSWORD}/${APP_DB_PASSWORD}/g" \
    /docker-entrypoint-initdb.d/02-users.sql.tmpl \
    | psql -v ON_ERROR_STOP=1 -U "${POSTGRES_USER:-postgres}" -d "${POSTGRES_DB:-demo}"
