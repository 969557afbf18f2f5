# Sourced by ./kipcheck and ./kipcheck-tests: make .venv with kipcheck installed.
# Re-installs only when pyproject.toml changed, so repeated runs start at once.
VENV="${KIPCHECK_VENV:-$KIPCHECK_ROOT/.venv}"
# Bytecode caches (__pycache__, git-ignored) let every xdist worker and subprocess start
# without recompiling the tree, pytest's rewritten test modules included; an environment
# that turns them off (PYTHONDONTWRITEBYTECODE) makes each of them compile everything again.
unset PYTHONDONTWRITEBYTECODE

ensure_venv() {
  local stamp="$VENV/.kipcheck-installed" want
  want="$(sha256sum "$KIPCHECK_ROOT/pyproject.toml" | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/kipcheck" ]; then
    return 0
  fi
  local py="${PYTHON:-python3}"
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "kipcheck needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2
    return 2
  fi
  echo "kipcheck: installing into $VENV (first run only) ..." >&2
  "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$KIPCHECK_ROOT" >&2
  echo "$want" > "$stamp"
}
