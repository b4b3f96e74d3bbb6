"""Writes that never leave a half-written file: checked output paths and the one atomic writer."""

from __future__ import annotations

import os
import tempfile

from tuner.core.errors import TunerError


def check_output_path(path: str, flag: str = "-o", example: str = "model.ftpkg") -> None:
    """Refuse what a rename would destroy or cannot replace: an empty name, a folder, a FIFO, a device, a socket
    or a symlink (a rename replaces the link itself, not the file it points to: name that file instead)."""
    import stat

    if not path:
        raise TunerError(f"{flag} is empty", f"give a file name, e.g. {flag} {example}")
    if os.path.isdir(path):
        raise TunerError(f"{path}: is a directory", f"give a file name, e.g. {flag} {example}")
    if os.path.islink(path):
        raise TunerError(
            f"{path}: is a symbolic link (to {os.readlink(path)}); it is not replaced",
            f"give the file it points to as {flag}, or another name",
        )
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a regular file"
            )
            raise TunerError(f"{path}: is {kind}; only regular files are replaced", f"choose another {flag}")


def atomic_write(path: str, write, flag: str = "-o", example: str = "model.ftpkg") -> None:
    """Call write(tmp_path), fsync, then rename onto path (the one atomic writer of the project); the target
    folder must be writable. Failures to write (disk full, read-only file system) are TunerErrors."""
    check_output_path(path, flag, example)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        raise TunerError(f"{path}: folder {directory} does not exist", f"create it first or choose another {flag}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    except OSError as err:
        raise TunerError(f"{path}: cannot write to {directory} ({err.strerror})", f"choose a writable {flag}") from err
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:  # on disk before the rename makes it visible
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except OSError as err:
        raise TunerError(
            f"{path}: writing failed ({err.strerror or err}); nothing was written",
            "free disk space or choose another " + flag,
        ) from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_writable(path: str, flag: str = "-o", example: str = "model.ftpkg") -> None:
    """Fail before a long build rather than after it: the name is one a rename may replace, and a file can be
    created beside it (tried, not inferred from permissions: root passes access() on /proc and read-only mounts)."""
    check_output_path(path, flag, example)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(directory):
        raise TunerError(f"{path}: folder {directory} does not exist", f"create it first or choose another {flag}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise TunerError(
            f"{path}: folder {directory} is not writable ({err.strerror})", f"choose a writable {flag}"
        ) from err
