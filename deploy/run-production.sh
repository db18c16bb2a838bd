#!/usr/bin/env bash
# Deep Think in production: the commands the systemd units run (deploy/systemd/), and all of
# them at once on this machine.
#
#   deploy/run-production.sh           prepare, then the web process and DEEPTHINK_WORKERS (2)
#                                      workers, in the foreground; Ctrl-C or SIGTERM stops
#                                      them all, the workers handing their sessions over
#   deploy/run-production.sh prepare   migrate, collect static files, create the first admin
#   deploy/run-production.sh web       daphne on DEEPTHINK_BIND:DEEPTHINK_PORT (127.0.0.1:8000)
#   deploy/run-production.sh worker    one `manage.py runworker thinking`
#   deploy/run-production.sh manage …  any other manage.py command, on these settings
#
# Settings come from the environment and from DEEPTHINK_ENV_FILE (default: deploy/.env, if
# it exists): KEY=value lines as systemd's EnvironmentFile= reads them (no shell expansion;
# one pair of quotes around a value is removed). A variable already set wins over the file.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="$VENV/bin/python"

load_env_file() {
  local file="$1" line key value
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line#"${line%%[![:space:]]*}"}"
    line="${line%"${line##*[![:space:]]}"}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    key="${line%%=*}"
    value="${line#*=}"
    if [[ "$line" != *=* || ! "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      echo "$file: not a KEY=value line: $line" >&2
      exit 2
    fi
    if [[ ${#value} -ge 2 && ( ("$value" == \"*\") || ("$value" == \'*\') ) ]]; then
      value="${value:1:${#value}-2}"
    fi
    [[ -n "${!key+set}" ]] || export "$key=$value"
  done <"$file"
}

ENV_FILE="${DEEPTHINK_ENV_FILE:-$ROOT/deploy/.env}"
if [[ -f "$ENV_FILE" ]]; then
  load_env_file "$ENV_FILE"
elif [[ -n "${DEEPTHINK_ENV_FILE:-}" ]]; then
  echo "DEEPTHINK_ENV_FILE=$DEEPTHINK_ENV_FILE: no such file" >&2
  exit 2
fi
export DEBUG="${DEBUG:-0}"

manage() {
  "$PYTHON" manage.py "$@"
}

prepare() {
  manage migrate --noinput
  # Hashed names and compressed copies, for the proxy (or WhiteNoise) to serve.
  manage collectstatic --noinput --verbosity 1
  # The first admin, from DJANGO_SUPERUSER_USERNAME, _PASSWORD and _EMAIL, once: an
  # existing account is left as it is (its password changes in the admin or with
  # `manage.py changepassword`).
  if [[ -n "${DJANGO_SUPERUSER_USERNAME:-}" ]]; then
    if manage shell --no-imports -c '
import os, sys
from django.contrib.auth import get_user_model
name = os.environ["DJANGO_SUPERUSER_USERNAME"]
sys.exit(0 if get_user_model().objects.filter(username=name).exists() else 1)'; then
      echo "Admin $DJANGO_SUPERUSER_USERNAME exists: left as it is."
    else
      manage createsuperuser --noinput
    fi
  fi
}

web() {
  local flags=(--websocket-max-frame-size 65536)  # as the Makefile's DAPHNE_FLAGS
  # Behind the proxy, daphne's access log shows the client the proxy saw (X-Real-IP, which
  # the proxy sets itself); the app reads X-Forwarded-For (DEEPTHINK_TRUSTED_PROXY_COUNT).
  if [[ "${DEEPTHINK_TRUSTED_PROXY_COUNT:-0}" != "0" ]]; then
    flags+=(--proxy-headers --proxy-headers-host X-Real-IP)
  fi
  exec "$VENV/bin/daphne" "${flags[@]}" -b "${DEEPTHINK_BIND:-127.0.0.1}" \
    -p "${DEEPTHINK_PORT:-8000}" config.asgi:application
}

worker() {
  exec "$PYTHON" manage.py runworker thinking
}

everything() {
  prepare
  local pids=() n
  "$0" web &
  pids+=($!)
  for ((n = 1; n <= ${DEEPTHINK_WORKERS:-2}; n++)); do
    "$0" worker &
    pids+=($!)
  done
  echo "Deep Think: web on ${DEEPTHINK_BIND:-127.0.0.1}:${DEEPTHINK_PORT:-8000} (PID ${pids[0]})," \
    "${DEEPTHINK_WORKERS:-2} workers (PIDs ${pids[*]:1}); Ctrl-C stops them"
  stop() {
    trap - INT TERM
    kill -TERM "${pids[@]}" 2>/dev/null || true
  }
  trap stop INT TERM
  # Until one of them exits (or a signal): then the others are stopped too.
  local status=0
  wait -n "${pids[@]}" || status=$?
  stop
  wait "${pids[@]}" || true
  return "$status"
}

case "${1:-all}" in
  prepare) prepare ;;
  web) web ;;
  worker) worker ;;
  all) everything ;;
  manage)
    shift
    exec "$PYTHON" manage.py "$@"
    ;;
  *)
    echo "usage: $0 [all|prepare|web|worker|manage COMMAND...]" >&2
    exit 2
    ;;
esac
