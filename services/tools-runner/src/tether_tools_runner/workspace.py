"""The workspace as the file tools see it: every path confined by `safety.paths.resolve`,
files opened without following a symlink swapped in after the check (O_NOFOLLOW)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tether_common.errors import PathDenied
from tether_common.safety import resolve
from tether_tools_runner.tool import ToolFailure

MAX_READ_BYTES = 5_000_000


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, path: str, *, write: bool) -> Path:
        try:
            return resolve(self.root, path, write=write)
        except PathDenied as exc:
            raise ToolFailure("path_denied", exc.message) from None

    def shown(self, real: Path) -> str:
        """The path as the model should write it: relative to the workspace."""
        root = Path(os.path.realpath(self.root))
        return str(real.relative_to(root)) if real != root else "."

    def read_bytes(self, real: Path, *, limit: int = MAX_READ_BYTES) -> bytes:
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise ToolFailure("not_found", f"{self.shown(real)} does not exist.") from None
        except IsADirectoryError:
            raise ToolFailure("is_directory", f"{self.shown(real)} is a directory.") from None
        except OSError as exc:
            raise ToolFailure("io_error", f"{self.shown(real)}: {exc.strerror}.") from None
        with os.fdopen(fd, "rb") as handle:
            if not os.path.isfile(real):
                raise ToolFailure("not_a_file", f"{self.shown(real)} is not a regular file.")
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ToolFailure("too_large", f"{self.shown(real)} is larger than {limit} bytes.")
        return data

    def read_text(self, real: Path) -> tuple[str, bytes]:
        data = self.read_bytes(real)
        if b"\x00" in data[:8192]:
            raise ToolFailure("binary_file", f"{self.shown(real)} looks binary; not read.")
        return data.decode("utf-8", errors="replace"), data

    def write_bytes(self, real: Path, data: bytes) -> None:
        """Write atomically: a temporary file beside the target, then rename over it."""
        real.parent.mkdir(parents=True, exist_ok=True)
        temp = real.with_name(f".{real.name}.tether-{os.getpid()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            mode = stat.S_IMODE(os.stat(real, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            mode = 0o644
        fd = os.open(temp, flags, mode)  # an overwritten script stays executable
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, real)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise


__all__ = ["Workspace"]
