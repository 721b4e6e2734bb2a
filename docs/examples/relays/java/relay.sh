#!/bin/sh
# Runs the Java relay (built by ../install.sh into classes/) on Debian's jars; arguments pass on.
dir="$(dirname "$0")"
exec java -cp "$dir/classes:/usr/share/java/postgresql.jar:/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar" Relay "$@"
