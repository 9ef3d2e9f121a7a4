#!/bin/sh
# Entrypoint of the offline PostgreSQL image built by scripts/images: the subset of the
# official postgres image's interface helix-es, docker-compose.yml and Testcontainers use.
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER
#   (default postgres), POSTGRES_DB (default: the user), POSTGRES_INITDB_ARGS, PGDATA.
# The first start of an empty PGDATA runs initdb (scram-sha-256 over TCP from anywhere) and
# creates the database in single-user mode; later starts just run the server. Runs as the
# image's user postgres (uid 999), like the official image after it drops root.
set -eu

if [ "${1#-}" != "$1" ]; then
  set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo "error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)" >&2
    exit 1
  fi
  pwfile="/tmp/.pgpass.$$"
  umask 077
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
  # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C \
    --auth-local=trust --auth-host="$auth" ${POSTGRES_INITDB_ARGS:-}
  rm -f "$pwfile"
  printf 'host all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
  printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\";" | postgres --single -D "$PGDATA" -c listen_addresses='' postgres >/dev/null
  fi
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
