"""tests/llm: the helper modules beside the tests are importable (``_harness_run``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
