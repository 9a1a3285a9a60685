"""`TETHER_PROFILE_DIR`: a service process writes its profile when it stops, including
the way uvicorn stops it (SIGTERM handled, then raised again to die of it); SIGUSR1
starts the profile afresh; the report names the functions that took the time."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tether_common.profiling import profiled, read_rows, report

# A busy function, then the end uvicorn gives a process after SIGTERM: its own handler
# drains, restores the previous handler and raises the signal again.
CHILD = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    from tether_common.profiling import profiled

    def busy_h17_function():
        return sum(i * i for i in range(200_000))

    def start_up_h17_function():
        return sum(i * i for i in range(200_000))

    with profiled("svc", Path(sys.argv[1])):
        start_up_h17_function()
        signal.raise_signal(signal.SIGUSR1)  # what the bench sends once ready
        busy_h17_function()
        if sys.argv[2] == "sigterm":
            signal.raise_signal(signal.SIGTERM)
    """
)


def run_child(folder: Path, how: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), how], capture_output=True, timeout=120
    )
    return done.returncode


def test_a_process_ended_by_sigterm_writes_its_profile(tmp_path: Path) -> None:
    code = run_child(tmp_path, "sigterm")
    assert code == -signal.SIGTERM  # it still dies of the signal
    (path,) = tmp_path.glob("svc-*.prof")
    rows, total, _idle = read_rows([path])
    assert total > 0
    assert any("busy_h17_function" in row.function for row in rows)
    # SIGUSR1 started the profile afresh: what ran before it is not in it.
    assert not any("start_up_h17_function" in row.function for row in rows)
    assert "busy_h17_function" in report("svc", [path], top=5)


def test_a_process_that_returns_writes_its_profile(tmp_path: Path) -> None:
    assert run_child(tmp_path, "return") == 0
    assert len(list(tmp_path.glob("svc-*.prof"))) == 1


def test_without_a_folder_the_process_is_left_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with profiled("svc", None):
        assert signal.getsignal(signal.SIGTERM) is before
        assert sys.getprofile() is None
