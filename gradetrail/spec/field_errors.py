"""Pydantic validation errors as one user-facing line each: the file, the dotted field and
the fix (with a "did you mean" for unknown keys)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from gradetrail.spec.eval import EvalSpec
from gradetrail.spec.scorer import GradeParse, JsonParse, NumericParse, ScorerSpec


def format_errors(
    source: str,
    errors: list[Any],
    root: type[BaseModel] = EvalSpec,
    set_keys: Sequence[str] = (),
    set_label: str = "--set",
) -> list[str]:
    """One line a problem (pydantic's ``exc.errors()``, in its order, duplicates once),
    without the "required field is missing" line of a field whose misspelling another line
    names: ``promt: unknown key; did you mean 'prompt'?`` alone, not after ``prompt:
    required field is missing``, which sends the reader the wrong way. ``root`` is the
    model that was validated (an :class:`EvalSpec`, or a sweep file's model): its fields
    are the keys a "did you mean" or "allowed" names. An error at or under one of
    ``set_keys`` (the dotted keys of ``--set`` overrides) reads ``--set dataset.pth: ...``
    (``set_label`` and the path): the spec file does not hold what it names."""
    misspelt = set()
    for err in errors:
        if err["type"] == "extra_forbidden" and (close := _close_key(err, root)) is not None:
            misspelt.add((*tuple(err["loc"])[:-1], close))
    lines = (
        _format_error(source, err, root, set_keys, set_label)
        for err in errors
        if not (_is_missing(err) and tuple(err["loc"]) in misspelt)
    )
    return list(dict.fromkeys(lines))


def _is_missing(err: Any) -> bool:
    """A required field is missing (pydantic's, or a validator's saying so)."""
    return err["type"] == "missing" or (
        err["type"] == "value_error" and "required field is missing" in err["msg"]
    )


def _close_key(err: Any, root: type[BaseModel]) -> str | None:
    """The allowed key an unknown key most likely misspells, or None."""
    _, model = _walk(tuple(err["loc"]), root)
    allowed = sorted(model.model_fields) if model else []
    close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1, cutoff=0.6)
    return close[0] if close else None


def _format_error(
    source: str,
    err: Any,
    root: type[BaseModel],
    set_keys: Sequence[str] = (),
    set_label: str = "--set",
) -> str:
    loc = tuple(err["loc"])
    field_path, model = _walk(loc, root)
    where = ".".join(field_path).replace(".[", "[") or "(top level)"
    if any(_set_by(key, where, err["type"]) for key in set_keys):
        where = f"{set_label} {where}"
    kind = err["type"]
    if kind == "extra_forbidden":
        close = _close_key(err, root)
        allowed = sorted(model.model_fields) if model else []
        hint = f"did you mean '{close}'?" if close else f"allowed: {', '.join(allowed)}"
        return f"{source}: {where}: unknown key; {hint}"
    if kind == "missing" and loc[:1] == ("scorers",) and loc[2:] == ("scorer",):
        return f"{source}: {where}: missing 'type'; add type: exact, regex, numeric, ..."
    if kind == "missing":
        return f"{source}: {where}: required field is missing; add it"
    if kind == "union_tag_invalid":
        expected = err.get("ctx", {}).get("expected_tags", "")
        tag = "kind" if field_path and field_path[-1] == "parse" else "type"
        return f"{source}: {where}.{tag}: unknown {tag}; use one of {expected}"
    if kind == "union_tag_not_found":
        given = err.get("input")
        keys = [str(k) for k in given] if isinstance(given, dict) else []
        if close := difflib.get_close_matches("type", keys, n=1, cutoff=0.6):
            return f"{source}: {where}.{close[0]}: unknown key; did you mean 'type'?"
        return f"{source}: {where}: missing 'type'; add type: exact, regex, numeric, ..."
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "literal_error":
        msg = msg.replace("Input should be", "use")
    elif kind == "string_pattern_mismatch" and field_path == ["name"]:
        msg = "use letters, digits, '.', '_' or '-' (it names the results directory)"
    got = err.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) else ""
    if field_path and field_path[-1] in _NEVER_SHOWN:
        shown = ""  # it may hold a credential: the error never repeats it
    if kind == "literal_error" and isinstance(got, str):
        shown += _literal_hint(got, err.get("ctx", {}).get("expected", ""), field_path)
    return f"{source}: {where}: {msg}{shown}"


def _literal_hint(got: str, expected: str, field_path: list[str]) -> str:
    """What to write instead of ``got``, one of the quoted values of pydantic's
    ``expected``: the one it misspells or miscapitalizes (``openAI``, ``opnai``; never
    another word: ``median`` is not ``mean``), or, for a model's ``provider`` naming a
    server (``vllm``, ``ollama``), the provider that speaks to it."""
    values = re.findall(r"'([^']*)'", expected)
    folded = {v.lower(): v for v in values}
    close = difflib.get_close_matches(got.lower(), list(folded), n=1, cutoff=0.85)
    if close:
        return f"; did you mean '{folded[close[0]]}'?"
    if field_path[-1:] == ["provider"] and "openai_compatible" in values:
        return (
            "; a server speaking OpenAI's Chat Completions (vLLM, Ollama, llama.cpp, TGI, "
            "a gateway) is provider: openai_compatible with its base_url"
        )
    return ""


def _set_by(key: str, where: str, kind: str) -> bool:
    """Whether the override of dotted ``key`` put the value at ``where`` there: at or under
    the key, or an unknown key or scorer type on its path (``--set runn.epochs=2`` made
    ``runn``; ``--set scorer.type=numerc`` is reported at ``scorer``)."""
    if where == key or where.startswith((f"{key}.", f"{key}[")):
        return True
    on_its_path = ("extra_forbidden", "union_tag_invalid", "union_tag_not_found")
    return kind in on_its_path and key.startswith(f"{where}.")


#: fields whose value an error never repeats (a URL may hold a password)
_NEVER_SHOWN = frozenset({"base_url"})


def _walk(loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[list[str], type[BaseModel] | None]:
    """Turn a pydantic error location into a user-facing dotted path, and find the model
    class that holds its last key (for "did you mean"), starting from ``root``."""
    model: type[BaseModel] | None = root
    path: list[str] = []
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int):
            path.append(f"[{part}]")
            continue
        if model is None:
            path.append(str(part))
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            candidates = _union_members_by_tag(path)
            if str(part) in candidates:  # discriminated-union tag; not a user key
                model = candidates[str(part)]
                continue
            path.append(str(part))
            if last:
                break
            model = None
            continue
        path.append(str(part))
        if not last:
            model = _model_of(field.annotation)
    if path[:1] == ["scorers"] and len(path) > 2 and path[2] == "scorer":
        del path[2]  # an entry is written flat: {name, type, ...}, its scorer's keys beside
    return path, model


def _union_members_by_tag(path: list[str]) -> dict[str, type[BaseModel]]:
    if path and path[-1] == "scorer":
        return _scorer_classes()
    if path and path[-1] == "parse":
        return {"grade": GradeParse, "numeric": NumericParse, "json": JsonParse}
    return {}


def _scorer_classes() -> dict[str, type[BaseModel]]:
    import typing

    members = typing.get_args(typing.get_args(ScorerSpec)[0])
    return {m.model_fields["type"].annotation.__args__[0]: m for m in members}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
