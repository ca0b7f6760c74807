# Shared by scripts/test and scripts/demo: create .venv with a Python >= 3.11 and install the project
# (with the given extras) from PyPI, again whenever pyproject.toml changes.

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "Phalanx needs Python 3.11 or newer; none was found (set PYTHON=/path/to/python3.11)." >&2
  return 1
}

ensure_venv() {
  local extras="${1:-}" spec="." stamp=".venv/.installed-${1:-base}"
  [ -n "$extras" ] && spec=".[$extras]"
  if [ ! -x .venv/bin/python ]; then
    local python
    python=$(find_python)
    echo "Creating .venv with $python"
    "$python" -m venv .venv
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "Installing $spec into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
    touch "$stamp"
  fi
}
