"""The set of a workspace's directories (with their inodes) that the write detector keeps.

Choices, and why:

- **A parent → children map beside the set.** A call's directory effects are the
  difference, inside the subtrees its events covered, between this set and what the
  walk lists now. Finding the set's members inside a subtree by testing every member
  cost about 2.5 ms per call with 5,000 directories, and once per dirty directory for a
  `cp -r`: the cost of a call grew with the workspace. With the map, :meth:`subtree`
  visits only the subtree asked for.
- **Every ancestor is linked**, member or not (a directory below an ignored one, or
  one whose parent was removed first within a batch), so a subtree is never missing a
  member further down. An ancestor that is not a member is unlinked again once nothing
  below it is (:meth:`pop`), so the map never holds more than the members' ancestry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class DirectorySet:
    """Directory path (relative, never "" for the root) → inode, and each one's children."""

    def __init__(self) -> None:
        self._inodes: dict[str, int] = {}
        # parent ("" for the root) → the paths linked below it (members or their ancestors).
        self._children: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._inodes)

    def __contains__(self, path: object) -> bool:
        return path in self._inodes

    def __iter__(self) -> Iterator[str]:
        return iter(self._inodes)

    def add(self, path: str, inode: int) -> None:
        if path in self._inodes:
            self._inodes[path] = inode
            return
        self._inodes[path] = inode
        child = path
        while child:
            parent = _parent(child)
            siblings = self._children.setdefault(parent, set())
            if child in siblings:
                break  # the rest of the way up is linked already
            siblings.add(child)
            child = parent

    def pop(self, path: str) -> int:
        inode = self._inodes.pop(path)
        child = path
        while child and child not in self._inodes and not self._children.get(child):
            self._children.pop(child, None)
            self._children[_parent(child)].discard(child)
            child = _parent(child)
        return inode

    def subtree(self, roots: Iterable[str]) -> set[str]:
        """The members that are one of ``roots`` or below one ("" is the whole set)."""
        found: set[str] = set()
        stack: list[str] = []
        for root in roots:
            if not root:
                return set(self._inodes)
            if root in self._inodes:
                found.add(root)
            stack.append(root)
        seen: set[str] = set()
        while stack:
            directory = stack.pop()
            if directory in seen:
                continue  # nested roots (`cp -r` reports each directory it makes)
            seen.add(directory)
            for child in self._children.get(directory, ()):
                if child in self._inodes:
                    found.add(child)
                stack.append(child)
        return found
