"""Median and p99 of a list of durations."""

from __future__ import annotations

import statistics


def summary(samples_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99


def line(label: str, samples_ms: list[float]) -> str:
    median, p99 = summary(samples_ms)
    return f"{label:48} n={len(samples_ms):5}  median {median:7.3f} ms  p99 {p99:7.3f} ms"
