"""Which paths a provider's local-channel frame may make the node touch (DEMOTE's directory to adopt, MATERIALIZE's
target to write): only beneath the directory the node shares with its providers, never inside the node's own
data dir, never through a symbolic link. A frame naming anything else is refused, so that a buggy or hostile
local client cannot have the node move, delete or write a directory of its choosing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class PathRefused(ValueError):
    """A path a frame named that the node may not touch; the message says why."""


@dataclass(frozen=True)
class ProviderPaths:
    """`root`: the directory the node's providers keep their stores beneath (a sidecar's: its executor JVM's
    directory, the parent of its data dir); `data_dir`: the node's own, never handed out."""

    root: Path
    data_dir: Path

    def checked(self, named: str, what: str) -> Path:
        """`named` as a path the node may touch, or PathRefused naming `what` it was and why not."""
        if not named or "\x00" in named:
            raise PathRefused(f"{what} {named!r} is empty or holds a NUL byte")
        if not os.path.isabs(named):
            raise PathRefused(f"{what} {named!r} is not an absolute path")
        if ".." in Path(named).parts:
            # Checked lexically, `a/link/..` would pass as `a` while the kernel follows the link first.
            raise PathRefused(f"{what} {named!r} holds a '..' component")
        path = Path(os.path.normpath(named))
        if path.name in ("", ".", ".."):
            raise PathRefused(f"{what} {named!r} names no directory entry")
        root = Path(os.path.realpath(self.root))
        parent = Path(os.path.realpath(path.parent))
        if parent != root and root not in parent.parents:
            raise PathRefused(
                f"{what} {named!r} is not beneath {root}, the directory this node shares with its providers"
            )
        if os.path.islink(parent / path.name):
            raise PathRefused(f"{what} {named!r} is a symbolic link")
        resolved = parent / path.name
        data_dir = Path(os.path.realpath(self.data_dir))
        if resolved == data_dir or data_dir in resolved.parents or resolved in data_dir.parents:
            raise PathRefused(f"{what} {named!r} is the node's data dir {data_dir} or holds it")
        return resolved
