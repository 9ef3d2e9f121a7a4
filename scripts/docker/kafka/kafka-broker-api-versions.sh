#!/bin/bash
# The official image's health probe, same name and path (docker-compose.yml uses it).
# shellcheck disable=SC2086
exec java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
  -Dlog4j.configuration=file:/opt/kafka/config/tools-log4j.properties \
  -cp '/opt/kafka/libs/*' kafka.admin.BrokerApiVersionsCommand "$@"
