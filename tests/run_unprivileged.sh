#!/usr/bin/env bash
# CI's second pass of the sandbox tests, as a non-root user: the sandbox then has no `nobody` to drop
# to and no cgroup to make, so it must isolate by user namespaces (or refuse), and the tests check
# what that mode promises. As root: create the user `celtk-ci` if missing and run the tests as it.
# Not root: `make test` has already run them unprivileged, so there is nothing to add; say so.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
USER_NAME=${CELTK_CI_USER:-celtk-ci}
if [ "$(id -u)" != 0 ]; then
  echo "run_unprivileged: already running as uid $(id -u); make test ran the sandbox tests unprivileged. Skipped."
  exit 0
fi
if ! id -u "$USER_NAME" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$USER_NAME"
fi
repo=$PWD
base=$("$PY" -c 'import os, sys; print(os.path.realpath(sys.base_prefix))')
# The interpreter or the clone may sit under a directory the user cannot enter (pyenv in /root): in a
# private mount namespace, cover that directory with an empty tmpfs and bind just these two back.
exec unshare --mount bash -c '
set -euo pipefail
user=$1; repo=$2; base=$3; py=$4; shift 4
blocked() { setpriv --reuid="$user" --regid="$user" --clear-groups test ! -r "$1" -o ! -x "$1"; }
for dir in "$repo" "$base"; do
  blocked "$dir" || continue
  top=$dir  # the highest ancestor the user cannot enter
  parent=$(dirname "$dir")
  while [ "$parent" != / ]; do
    if blocked "$parent"; then top=$parent; fi
    parent=$(dirname "$parent")
  done
  holders=()
  for keep in "$repo" "$base"; do
    case "$keep/" in "$top"/*) (cd "$keep" && exec sleep 600) & holders+=("$!:$keep");; esac
  done
  for h in "${holders[@]}"; do  # each holder must stand in its directory before the tmpfs covers it
    until [ "$(readlink "/proc/${h%%:*}/cwd")" = "${h#*:}" ]; do sleep 0.05; done
  done
  mount -t tmpfs -o mode=755 tmpfs "$top"
  for h in "${holders[@]}"; do
    pid=${h%%:*}; keep=${h#*:}
    mkdir -p "$keep"; mount -c --rbind "/proc/$pid/cwd" "$keep"; kill "$pid"
  done
done
cd "$repo"
exec setpriv --reuid="$user" --regid="$user" --clear-groups env HOME=/nonexistent PATH="$PATH" \
  "$py" -m pytest -q -p no:cacheprovider --noconftest tests/unit/test_sandbox.py "$@"
' run-unprivileged "$USER_NAME" "$repo" "$base" "$PY" "$@"
