#!/usr/bin/env bash
# Runs Schemathesis (PyPI) against a running `journal serve`: it reads the server's own
# OpenAPI document (GET /openapi.json), generates requests for every operation from it, and
# checks that no answer is a server error (5xx), that every answer's status, content type,
# headers and body are the ones the document gives, that what the document says is invalid is
# refused, that a route behind a token refuses a request without one, and that a method a
# route does not take is refused. It starts no server: give it one.
#
#   clients/schemathesis.sh URL TOKEN [ID...]
#
# URL is the server (http://127.0.0.1:7070), TOKEN a token with the `admin` scope (so that
# every route is reachable), and each ID a session, task or run recorded in the journal:
# the replay, evidence and read-model routes are then asked about them half of the time (and
# about generated ids the other half), so that their answers are checked, not only their 404s.
#
# Environment: SCHEMATHESIS_EXAMPLES (examples per operation, default 100), SCHEMATHESIS_SEED
# (default 1, for a run that can be repeated), SCHEMATHESIS_VENV (the virtual environment it
# installs Schemathesis into, default target/schemathesis-venv), SCHEMATHESIS_REPORT (a
# directory for a JUnit report, default none).
#
# One worker: with two, CPython 3.11's parser can fail under Schemathesis's threads ("AST
# constructor recursion depth mismatch", a Python error, not the server's).
#
# Left out: GET /v1/events/stream (an event stream does not end, so no answer is complete),
# and the check that every request the document calls valid is accepted: a command's answer
# depends on the journal's state (`create_task` twice is `422 task_exists`), and
# `expectedVersion` and `If-Match` must agree, which a schema cannot say.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 URL TOKEN [ID...]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
url="${1%/}"
export JOURNAL_TOKEN="$2"
shift 2
venv="${SCHEMATHESIS_VENV:-$root/target/schemathesis-venv}"
examples="${SCHEMATHESIS_EXAMPLES:-100}"
seed="${SCHEMATHESIS_SEED:-1}"

if [[ ! -x "$venv/bin/schemathesis" ]]; then
  echo "== installing Schemathesis into $venv"
  if ! python3 -m venv "$venv"; then
    # Debian's python3 keeps venv in a package of its own.
    sudo=""
    if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
    ($sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv) >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis>=4.32,<5"
fi

config="$(mktemp -d)/schemathesis.toml"
trap 'rm -rf "$(dirname "$config")"' EXIT
{
  echo '# Written by clients/schemathesis.sh.'
  echo 'request-timeout = 60.0'
  # No state kept between runs (failures replayed from an earlier run): each run stands alone.
  echo 'cache = { enabled = false }'
  echo 'headers = { Authorization = "Bearer ${JOURNAL_TOKEN}" }'
  # Invalid data may also be refused for its size: a query over the server's 8 KiB is `414`.
  echo '[checks.negative_data_rejection]'
  echo 'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "414", "415", "422", "428", "429", "431"]'
  echo '[parameters]'
  # A read model waits up to `timeoutMs` for `minPosition`: keep the waits short.
  echo '"query.timeoutMs" = 100'
  if [[ $# -gt 0 ]]; then
    echo '"path.id" = { dictionary = "ids", probability = 0.5 }'
    echo '"path.session" = { dictionary = "ids", probability = 0.5 }'
    echo '[dictionaries.ids]'
    printf 'values = ['
    sep=""
    for id in "$@"; do
      printf '%s"%s"' "$sep" "$id"
      sep=", "
    done
    echo ']'
  fi
} >"$config"

report=()
if [[ -n "${SCHEMATHESIS_REPORT:-}" ]]; then
  report=(--report junit --report-dir "$SCHEMATHESIS_REPORT")
fi

# JSON Lines bodies and answers (clients/schemathesis_hooks.py).
export PYTHONPATH="$root/clients${PYTHONPATH:+:$PYTHONPATH}"
export SCHEMATHESIS_HOOKS=schemathesis_hooks

"$venv/bin/schemathesis" --config-file "$config" run "$url/openapi.json" \
  --checks all \
  --exclude-checks positive_data_acceptance \
  --exclude-path /v1/events/stream \
  --phases examples,coverage,fuzzing \
  --max-examples "$examples" \
  --seed "$seed" \
  --workers 1 \
  --suppress-health-check too_slow,filter_too_much \
  "${report[@]}"
