"""Reading the files a user names (machine files, profiles, layer lists, cost tables): a
regular file of bounded size, checked before anything is read, so ``/dev/zero``, a FIFO
with no writer or a terminal can never make a call block or read forever."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["MAX_INPUT_FILE_BYTES", "InputFileNotFound", "read_input_bytes", "read_input_text"]

#: the largest input file read (bytes): far above any machine file, profile JSON or layer
#: list ipukern writes (a ResNet-50 training profile is a few MiB)
MAX_INPUT_FILE_BYTES = 256 * 1024 * 1024


class InputFileNotFound(FileNotFoundError):
    """A file the user named does not exist: the command line treats it as a name that names
    nothing (exit 2, like an unknown model or machine), not as a failure of the model."""


def read_input_bytes(path: Any, what: str = "input file",
                     max_bytes: int = MAX_INPUT_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path``.

    Opened without blocking (a FIFO with no writer returns at once) and checked with
    ``fstat`` on the open descriptor before reading, so the file read is the file checked.

    Raises
    ------
    ValueError
        ``path`` is not a regular file (a device, FIFO, socket or directory), or is larger
        than ``max_bytes``; the message names ``what`` and the path.
    InputFileNotFound
        ``path`` does not exist (a ``FileNotFoundError``).
    OSError
        The file cannot be opened (no permission).
    """
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(p, flags)
    except IsADirectoryError:
        raise ValueError(f"{what} {p}: is a directory, not a regular file") from None
    except FileNotFoundError:
        raise InputFileNotFound(f"{what} {p}: no such file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a character device" if stat.S_ISCHR(st.st_mode) else
                    "a block device" if stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise ValueError(f"{what} {p}: is {kind}; only regular files are read")
        if st.st_size > max_bytes:
            raise ValueError(f"{what} {p}: {st.st_size} B is over the {max_bytes} B limit "
                             "for input files")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:     # a file growing while read stops at the limit too
            b = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > max_bytes:
                raise ValueError(f"{what} {p}: over the {max_bytes} B limit for input files")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_input_text(path: Any, what: str = "input file",
                    max_bytes: int = MAX_INPUT_FILE_BYTES, encoding: str = "utf-8") -> str:
    """:func:`read_input_bytes` decoded (ValueError naming the file if it is not ``encoding``)."""
    data = read_input_bytes(path, what, max_bytes)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {Path(path)}: not {encoding} text ({e})") from None
