#!/bin/sh
# Entrypoint of the offline Redis image built by scripts/images. As the official redis
# image: arguments starting with '-' go to redis-server, and protected mode is off (the
# official image patches its default; here it is passed unless the arguments set it),
# since clients reach a container through its network, never through its loopback.
set -eu
if [ "${1#-}" != "$1" ]; then
  set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
fi
exec "$@"
