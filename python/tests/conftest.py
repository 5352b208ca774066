import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

# The package under test, for the tests that import it in the pytest process.
sys.path.insert(0, ranks.PYTHONPATH)
