#!/bin/sh
# Creates every topic of a topic list (infra/kafka/topics.txt); run by docker-compose.yml's
# kafka-init service. The local stack reads the same list in Python (infra.stack.bootstrap).
#
# Usage: create-topics.sh TOPICS_FILE
#   KAFKA_BOOTSTRAP_SERVERS  the broker to ask (required)
#   KAFKA_BIN                folder with kafka-topics.sh, if it is not on PATH
#
# Line format: `name partitions config`, config being comma-separated key=value pairs or `-`;
# `#` starts a comment. Existing topics are left as they are (--if-not-exists), so reruns are safe.
set -eu

topics_file=${1:?usage: create-topics.sh TOPICS_FILE}
: "${KAFKA_BOOTSTRAP_SERVERS:?set KAFKA_BOOTSTRAP_SERVERS}"
if [ -n "${KAFKA_BIN:-}" ]; then
    PATH="$KAFKA_BIN:$PATH"
fi

line_number=0
while IFS= read -r line || [ -n "$line" ]; do
    line_number=$((line_number + 1))
    line=${line%%#*}
    set -f
    # shellcheck disable=SC2086 # split the line into its fields
    set -- $line
    set +f
    [ "$#" -eq 0 ] && continue
    if [ "$#" -ne 3 ]; then
        echo "$topics_file:$line_number: expected \`name partitions config\`, got: $line" >&2
        exit 1
    fi
    name=$1 partitions=$2 config=$3

    set -- --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --create --if-not-exists \
        --topic "$name" --partitions "$partitions" --replication-factor 1
    if [ "$config" != "-" ]; then
        old_ifs=$IFS
        IFS=,
        set -f
        for pair in $config; do
            set -- "$@" --config "$pair"
        done
        set +f
        IFS=$old_ifs
    fi
    echo "topic $name: $partitions partition(s), config $config"
    kafka-topics.sh "$@"
done < "$topics_file"
