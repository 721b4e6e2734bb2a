#!/usr/bin/env bash
# Installs what the example relays need and builds the Java one; .ci/run runs it, and so can you.
#   python/  psycopg and pika from PyPI (python/requirements.txt), for the python3 on PATH
#   node/    pg and nats from npm (node/package-lock.json), into node/node_modules
#   java/    PostgreSQL's JDBC driver and the RabbitMQ Java client from Debian, compiled into java/classes
set -euo pipefail
cd "$(dirname "$0")"

python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r python/requirements.txt
(cd node && npm ci --no-audit --no-fund --silent)
jars="/usr/share/java/postgresql.jar /usr/share/java/amqp-client.jar /usr/share/java/slf4j-api.jar /usr/share/java/slf4j-nop.jar"
for jar in $jars; do
    if [ ! -f "$jar" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q libpostgresql-jdbc-java librabbitmq-client-java libslf4j-java > /dev/null \
            || { apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libpostgresql-jdbc-java librabbitmq-client-java libslf4j-java > /dev/null; }
        break
    fi
done
javac -d java/classes -cp /usr/share/java/postgresql.jar:/usr/share/java/amqp-client.jar java/Relay.java
echo "example relays ready: python3 python/relay.py, node node/relay.js, java/relay.sh"
