"""A model profile's settings for the benchmark, the regression check and the evaluations, typed.

Each is the settings model of the code that reads it, so a field's type, default and description are
declared once, there: ``bench`` is a :class:`~roost.bench.settings.BenchSettings`, ``regress`` a
:class:`~roost.regress.RegressConfig`, and each of ``evals`` the overrides ``EvalSettings.for_task``
lays on its task's recipe (:class:`EvalSpec`).

A profile holds only the fields it sets (:class:`Given`), and that is what it stores and passes on:
a saved block document keeps the JSON it had when these were plain dicts (``{}`` when nothing is
set), and ``**prof.bench`` asks the benchmark to change only those, so the flow's own values (the
server's ``--max-num-seqs`` level, the stream ceiling) and the reader's defaults apply to the rest.
Read as a mapping, a setting is exactly that dict: ``prof.bench == {"repeats": 1}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from roost.bench.settings import BenchSettings
from roost.errors import UserError
from roost.regress import RegressConfig


class Given(BaseModel, Mapping[str, Any]):
    """A settings model that keeps apart the fields given from the defaults: it serializes, maps and
    compares (with a dict) as the dict of the fields given; its attributes read every field."""

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping's keys, not pydantic's pairs
        return (k for k in type(self).model_fields if k in self.model_fields_set)

    def __len__(self) -> int:
        return len(self.model_fields_set)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BaseModel):
            return super().__eq__(other)
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented


class BenchOverrides(Given, BenchSettings):
    """The benchmark settings a profile sets (:class:`~roost.bench.settings.BenchSettings`); the
    others are the flow's (the server's --max-num-seqs, the stream ceiling) or the defaults."""

    @model_validator(mode="before")
    @classmethod
    def _none_is_the_default(cls, data: Any) -> Any:
        """A None where the field's default is not None means the default, as ``make_settings`` reads
        it (profiles stored before ``bench`` was typed were only checked there)."""
        if isinstance(data, dict):
            fields = cls.model_fields
            data = {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].default is None}
        return data


class RegressOverrides(Given, RegressConfig):
    """The regression-check settings a profile sets (:class:`~roost.regress.RegressConfig`); the
    others are its defaults."""


class EvalSpec(Given):
    """An accuracy evaluation a profile runs: its task and what it changes of the task's recipe
    (``roost.eval.runner.EvalSettings.for_task``, which checks the values); None: the recipe's."""

    model_config = ConfigDict(extra="ignore")  # as for_task did: a key it does not know is ignored

    task: str = Field(description="gsm8k, math500 or mmlu-pro.")
    dataset: str | None = Field(default=None, description="Path or Hub dataset repo; None: the task's upstream repo.")
    limit: int | None = Field(default=None, description="Questions asked at most; None: the whole sample.")
    per_category: int | None = Field(
        default=None, description="Questions per category; None: the task's default (MMLU-Pro 50).")
    seed: int | None = Field(default=None, description="Seed of the sample and of each question's; None: 0.")
    max_tokens: int | None = Field(
        default=None, description="Tokens per answer; None: the task's, capped to the server's window.")
    temperature: float | None = Field(default=None, description="Sampling temperature.")
    top_p: float | None = Field(default=None, description="Nucleus sampling: the share of probability kept.")
    top_k: int | None = Field(default=None, description="Top-k sampling (-1: off).")
    thinking: bool | None = Field(default=None, description="chat_template_kwargs.enable_thinking.")
    concurrency: int | None = Field(default=None, description="Requests in flight at once.")

    @model_validator(mode="after")
    def _valid_for_its_task(self) -> EvalSpec:
        from roost.eval.settings import EvalSettings

        try:
            EvalSettings.for_task(**self)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return self
