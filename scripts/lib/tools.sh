# Sourced by the scripts that run pinned Python tools (scripts/lint-infra,
# scripts/api-fuzz): a Python >= 3.11, and a virtualenv per pins file, cached under
# ${SIESTA_TOOLS_DIR:-~/.cache/siesta-tools}/<name>-<hash of the pins and Python>, built
# once and then reused. Callers define log() first.

PYTHON_VERSION=3.13.0
TOOLS=${SIESTA_TOOLS_DIR:-$HOME/.cache/siesta-tools}

# The pinned dependencies need Python >= 3.11 (networkx).
python_bin() {
    if [[ -n ${SIESTA_PYTHON:-} ]]; then
        echo "$SIESTA_PYTHON"
        return
    fi
    if command -v pyenv >/dev/null 2>&1 && pyenv prefix "$PYTHON_VERSION" >/dev/null 2>&1; then
        echo "$(pyenv prefix "$PYTHON_VERSION")/bin/python3"
        return
    fi
    local p
    for p in python3.13 python3.12 python3.11 python3; do
        if command -v "$p" >/dev/null 2>&1 &&
            "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$p"
            return
        fi
    done
    log "no Python >= 3.11 found (set SIESTA_PYTHON)"
    exit 1
}

# venv NAME PINS: the cached virtualenv with PINS installed (built once); prints its path.
venv() {
    local name=$1 pins=$2 key dir
    key=$({ cat "$pins"; "$PY" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)
    dir=$TOOLS/$name-$key
    if [[ ! -f $dir/.installed ]]; then
        mkdir -p "$TOOLS"
        # One installer at a time; a second waits and then finds the marker.
        exec 9>"$TOOLS/$name.lock"
        flock 9
        if [[ ! -f $dir/.installed ]]; then
            log "installing $pins into $dir"
            rm -rf "$dir"
            "$PY" -m venv "$dir"
            PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/bin/pip" install --quiet --no-input -r "$pins" >&2
            PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/bin/pip" check >/dev/null
            touch "$dir/.installed"
        fi
        exec 9>&-
    fi
    echo "$dir"
}

PY=$(python_bin)
