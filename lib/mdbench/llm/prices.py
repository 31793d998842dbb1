"""The one price rule of the llm room: ``params/llm_prices.yaml`` for the metering proxy, and the prices a
caller declares to the chat client (:class:`ModelPrice` both; USD per 1,000,000 tokens).

Each model has ``input`` (uncached input), ``cached_input`` and ``output`` prices. A call's cost is

    usd = ((tokens_in - tokens_cached) · input + tokens_cached · cached_input + tokens_out · output) / 1e6

with ``tokens_in`` the prompt tokens *including* the cached ones (as OpenAI-compatible endpoints report them).
Lookup is by exact model name, then without a ``provider/`` prefix (``openai/gpt-5`` → ``gpt-5``); a model
with no entry has no price (``None``) — never an invented zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mdbench.errors import InputError
from mdbench.paths import PROJECT_ROOT

PRICES_YAML = PROJECT_ROOT / "params" / "llm_prices.yaml"


@dataclass(frozen=True)
class ModelPrice:
    """USD per 1,000,000 tokens: input, output, cached input (``None``: cached tokens cost as input).

    >>> ModelPrice(2.0, 8.0).usd(1_000_000, 0, 500_000)
    6.0
    """

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None

    def usd(self, tokens_in: int, tokens_cached: int, tokens_out: int) -> float:
        """Cost [USD] of one call (``tokens_in`` includes ``tokens_cached``)."""
        cached = min(tokens_cached, tokens_in)
        cached_price = (self.cached_input_usd_per_mtok if self.cached_input_usd_per_mtok is not None
                        else self.input_usd_per_mtok)
        return ((tokens_in - cached) * self.input_usd_per_mtok + cached * cached_price
                + tokens_out * self.output_usd_per_mtok) / 1e6


class PriceTable:
    """Prices by model name (see module docstring)."""

    def __init__(self, prices: dict[str, ModelPrice], source: str = "<memory>"):
        self.prices = dict(prices)
        self.source = source

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """Read the YAML table; :class:`~mdbench.errors.InputError` names the file and the entry when malformed."""
        path = Path(path) if path is not None else PRICES_YAML
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read the price table ({exc})", path=str(path)) from None
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, dict):
            raise InputError('needs a "models:" mapping of model name → {input, cached_input, output}', path=str(path))
        out: dict[str, ModelPrice] = {}
        for name, entry in models.items():
            vals = {}
            for key in ("input", "cached_input", "output"):
                v = entry.get(key) if isinstance(entry, dict) else None
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise InputError(f"models.{name}.{key} must be a finite price >= 0 in USD per 1M tokens "
                                     f"(got {v!r})", path=str(path))
                vals[key] = float(v)
            out[str(name)] = ModelPrice(vals["input"], vals["output"], vals["cached_input"])
        return cls(out, str(path))

    def get(self, model: str | None) -> ModelPrice | None:
        """The price of ``model`` (exact, then without a ``provider/`` prefix), or ``None``."""
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        return self.prices.get(model.rsplit("/", 1)[-1])

    def describe(self, model: str | None) -> dict[str, Any] | None:
        p = self.get(model)
        return None if p is None else {"input_usd_per_mtok": p.input_usd_per_mtok,
                                       "cached_input_usd_per_mtok": p.cached_input_usd_per_mtok,
                                       "output_usd_per_mtok": p.output_usd_per_mtok, "table": self.source}
