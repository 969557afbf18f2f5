#!/bin/sh
# Install Debian's chromium for the report's browser test (reports/tests/test_browser.py)
# when it is missing. Idempotent and quiet: prints one line on failure, exits non-zero.
set -u
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "chromium.sh: chromium is missing and apt-get needs root (no passwordless sudo)" >&2; exit 1
  fi
fi
LOG=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get -o DPkg::Lock::Timeout=900 -qq update &&
       $SUDO apt-get -o DPkg::Lock::Timeout=900 -qq install -y --no-install-recommends chromium fonts-dejavu-core; } >"$LOG" 2>&1; then
  echo "chromium.sh: apt-get could not install chromium: $(tail -n 1 "$LOG")" >&2
  rm -f "$LOG"; exit 1
fi
rm -f "$LOG"
command -v chromium >/dev/null 2>&1
