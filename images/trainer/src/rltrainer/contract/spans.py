"""The ``--span`` of ``rltrainer bench ep``: one of the run's expert-parallel group layouts, written
by the kit's fabric gate (infra/config/ep_spans.py ``EpSpan.bench_arg``) and read by the bench.

``NAME:SIZE[:STRIDE[:FIRST[:COUNT[:TP]]]]``: ``SIZE`` ranks ``STRIDE`` apart, in blocks of
SIZE x STRIDE consecutive ranks tiling the ``COUNT`` ranks from ``FIRST`` (an empty or absent
COUNT: to the end of the world; a disaggregated rollout pool starts after the training ranks);
``TP``: the GPUs each routed expert's tokens go to (Megatron's DeepEP group with expert TP hands
DeepEP top-k x tp of experts x tp, megatron-lm 37f9161
megatron/core/transformer/moe/token_dispatcher.py:1356-1361). The writer (``Span.text``), the
reader (``parse_span``) and the groups a span forms (``span_groups``) live side by side here so
the two sides cannot drift.
"""

from __future__ import annotations

from typing import NamedTuple

SPAN_FORMAT = "NAME:SIZE[:STRIDE[:FIRST[:COUNT[:TP]]]]"


class Span(NamedTuple):
    """One EP group layout of the run (see the module docstring); ``count`` None: to the end."""

    name: str
    size: int
    stride: int = 1
    first: int = 0
    count: int | None = None
    tp: int = 1

    def text(self) -> str:
        """The span as ``parse_span`` reads it back (the shortest form that keeps every field)."""
        fields: list = [self.name, self.size, self.stride]
        if self.first or self.count is not None or self.tp > 1:
            fields.append(self.first)
        if self.count is not None or self.tp > 1:
            fields.append("" if self.count is None else self.count)
        if self.tp > 1:
            fields.append(self.tp)
        return ":".join(map(str, fields))

    def pool(self, world: int) -> tuple[int, int]:
        """(first, count): the ranks this layout's groups tile in a world of ``world`` ranks."""
        return self.first, world - self.first if self.count is None else self.count


def parse_span(text: str) -> Span:
    """``NAME:SIZE[:STRIDE[:FIRST[:COUNT[:TP]]]]`` -> :class:`Span`; ValueError names the text,
    the rule and the format."""
    parts = text.split(":")
    try:
        if not 2 <= len(parts) <= 6 or not parts[0]:
            raise ValueError
        numbers: list[int | None] = [int(p) for p in parts[1:4]]
        if len(parts) > 4:
            numbers.append(int(parts[4]) if parts[4] else None)
        numbers += [int(p) for p in parts[5:]]
    except ValueError:
        raise ValueError(
            f"--span {text!r}: use {SPAN_FORMAT}, e.g. training:8:1 or rollout:16:1:8 (a pool that starts "
            "at rank 8)") from None
    span = Span(parts[0], *numbers)
    if (span.size < 2 or span.stride < 1 or span.first < 0 or (span.count is not None and span.count < 1)
            or span.tp < 1):
        raise ValueError(f"--span {text!r}: SIZE must be >= 2, STRIDE, COUNT and TP >= 1, FIRST >= 0")
    return span


def span_groups(world: int, size: int, stride: int, first: int = 0) -> list[list[int]]:
    """The EP groups: ``size`` ranks ``stride`` apart, in blocks of size x stride consecutive ranks
    tiling the ``world`` ranks from ``first`` (Megatron's expert groups, SGLang's inside an engine,
    a disaggregated rollout pool after the training ranks)."""
    block = size * stride
    return [[start + offset + k * stride for k in range(size)]
            for start in range(first, first + world, block) for offset in range(stride)]
