"""Paths the tests share: the repository, the bundled examples and the GSM8K data.

Test helper modules (this one, ``protocol_server``, ``http_support``, ``run_support``,
``fake_judges``, ``judge_evals``) are imported by their bare names: pytest puts ``tests/``
on ``sys.path`` (the directory has no ``__init__.py``).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GSM8K_SPEC = EXAMPLES / "gsm8k.yaml"
GSM8K_DATA = EXAMPLES / "data" / "gsm8k"
