"""numpy and matplotlib come from Debian's packages (scripts/setup.sh), for
Debian's python: a script run by another python3 (first on the PATH) that
lacks one hands itself over to /usr/bin/python3."""
import importlib
import os
import sys

SYSTEM_PY = "/usr/bin/python3"


def need(module, script):
    """Imports `module`, or re-executes `script` (with this process's
    arguments) under Debian's python if it is missing here."""
    try:
        importlib.import_module(module)
    except ImportError:
        if os.path.exists(SYSTEM_PY) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PY):
            os.execv(SYSTEM_PY, [SYSTEM_PY, os.path.abspath(script)] + sys.argv[1:])
        raise
