"""A STAR knowledge-base API (``apis/apis/<name>.json``): input slots, outputs, required slots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import StarError, read_json


@dataclass
class StarApi:
    """A knowledge-base API of ``apis/apis/<name>.json``.

    Attributes:
        name: The API's name (the file's stem).
        function: The file's ``function`` (what the API does).
        db: The name of the database the API queries (the file's ``db``).
        inputs: The input slots, as in the file (``{"Name": ..., "Categories": [...] or absent,
            ...}``).
        outputs: The output fields, as in the file.
        required: The names of the input slots a query must fill.
        returns_count: Whether the API returns a count of matches (the file's ``returns_count``;
            False when absent).
    """

    name: str
    function: str
    db: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    required: list[str]
    returns_count: bool = False

    def slot(self, slot: str) -> dict[str, Any]:
        """The input slot named ``slot``.

        Args:
            slot: An input slot name (its ``Name``).

        Returns:
            dict[str, Any]: The slot's entry of :attr:`inputs`.

        Raises:
            StarError: The API has no such input slot (the message lists its slots).
        """
        for s in self.inputs:
            if s.get("Name") == slot:
                return s
        raise StarError(
            f"API {self.name}: no input slot {slot!r}; slots: {[s.get('Name') for s in self.inputs]}"
        )

    def categories(self, slot: str) -> list[str]:
        """The categorical values of input ``slot`` ([] for free-text slots).

        Args:
            slot: An input slot name.

        Returns:
            list[str]: The slot's ``Categories`` (a copy); empty for a free-text slot.

        Raises:
            StarError: The API has no such input slot.
        """
        return list(self.slot(slot).get("Categories") or [])

    @classmethod
    def load(cls, path: Path, errors: list[str]) -> StarApi | None:
        """Read and check one API file; problems are collected, not raised.

        Args:
            path: The ``apis/apis/<name>.json`` file.
            errors: A list to which each problem is appended as ``"path: problem"`` (missing or
                malformed file, missing keys, an input without ``Name``, a required slot that is not
                an input).

        Returns:
            StarApi | None: The API, or None when the file has a problem (then ``errors`` grew).
        """
        data = read_json(path, errors, "API file")
        if data is None:
            return None
        if not isinstance(data, dict):
            errors.append(f"{path}: expected a JSON object, got {type(data).__name__}")
            return None
        bad = []
        for key, typ in (
            ("input", list),
            ("output", list),
            ("required", list),
            ("db", str),
            ("function", str),
        ):
            if not isinstance(data.get(key), typ):
                bad.append(f"{key!r} missing or not a {typ.__name__}")
        if not bad:
            for i, s in enumerate(data["input"]):
                if not isinstance(s, dict) or not isinstance(s.get("Name"), str):
                    bad.append(f"input[{i}] has no 'Name'")
            names = {s.get("Name") for s in data["input"] if isinstance(s, dict)}
            missing = [r for r in data["required"] if r not in names]
            if missing:
                bad.append(f"required slot(s) {missing} are not input slots")
        if bad:
            errors.append(f"{path}: " + "; ".join(bad))
            return None
        return cls(
            name=path.stem,
            function=data["function"],
            db=data["db"],
            inputs=data["input"],
            outputs=data["output"],
            required=list(data["required"]),
            returns_count=bool(data.get("returns_count", False)),
        )
