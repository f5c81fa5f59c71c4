"""What every part of a contract's model shares: strict models, selector and path checks."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo

from scrape_contracts.contract.paths import confined_problem
from scrape_contracts.engine.select import SelectorError, compile_selector


class Strict(BaseModel):
    # unknown keys are mistakes (a typo'd "selectr" must not be silently ignored)
    model_config = ConfigDict(extra="forbid", frozen=True)


def compiled(selector: str) -> str:
    """``selector`` if the engine compiles it (CSS with ::text/::attr, or XPath); else ValueError saying why."""
    try:
        compile_selector(selector)
    except SelectorError as exc:
        raise ValueError(str(exc)) from None
    return selector


def confined(setting: str, value: str | None, info: ValidationInfo) -> str | None:
    # the loader passes the contract's folder; a contract built in code has no folder to be confined to
    contract_dir = (info.context or {}).get("contract_dir")
    if value is not None and contract_dir is not None:
        problem = confined_problem(setting, value, contract_dir)
        if problem:
            raise ValueError(problem)
    return value
