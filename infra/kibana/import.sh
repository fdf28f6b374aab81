#!/bin/sh
# Imports the ratings data views, saved search, visualizations and dashboard into Kibana.
# Idempotent (overwrite=true). Waits for Kibana to be available first.
#   KIBANA_URL (default http://127.0.0.1:5601), KIBANA_WAIT_S (default 300)
#   KIBANA_AUTH optional "user:password" for a secured Kibana
set -eu

KIBANA_URL="${KIBANA_URL:-http://127.0.0.1:5601}"
KIBANA_WAIT_S="${KIBANA_WAIT_S:-300}"
HERE="$(cd "$(dirname "$0")" && pwd)"
AUTH=""
if [ -n "${KIBANA_AUTH:-}" ]; then AUTH="--user ${KIBANA_AUTH}"; fi

echo "waiting for Kibana at ${KIBANA_URL} (up to ${KIBANA_WAIT_S} s)"
waited=0
# shellcheck disable=SC2086
until curl -fsS $AUTH "${KIBANA_URL}/api/status" 2>/dev/null | grep -q '"level":"available"'; do
  if [ "$waited" -ge "$KIBANA_WAIT_S" ]; then
    echo "Kibana is not available after ${KIBANA_WAIT_S} s" >&2
    exit 1
  fi
  sleep 5
  waited=$((waited + 5))
done

echo "importing ${HERE}/ratings.ndjson"
# shellcheck disable=SC2086
answer="$(curl -fsS $AUTH -X POST "${KIBANA_URL}/api/saved_objects/_import?overwrite=true" \
  -H "kbn-xsrf: true" --form "file=@${HERE}/ratings.ndjson")"
echo "$answer"
echo "$answer" | grep -q '"success":true' || { echo "import failed" >&2; exit 1; }
