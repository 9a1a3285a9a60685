"""The public surface of tether_common.safety: exactly what `__all__` promises."""

from __future__ import annotations

import tether_common.safety as safety
from tether_common.safety import paths, shell, urls


def test_package_exports_are_exactly_the_documented_api() -> None:
    assert sorted(safety.__all__) == [
        "Category",
        "Danger",
        "Decision",
        "Resolver",
        "ShellVerdict",
        "check",
        "check_address",
        "check_root",
        "classify",
        "protected_component",
        "protected_name",
        "resolve",
        "system_resolver",
    ]
    for name in safety.__all__:
        assert getattr(safety, name) is not None


def test_modules_export_what_they_define() -> None:
    for module in (paths, shell, urls):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_package_functions_are_the_module_functions() -> None:
    assert safety.classify is shell.classify
    assert safety.resolve is paths.resolve
    assert safety.check is urls.check
    assert safety.check_address is urls.check_address
