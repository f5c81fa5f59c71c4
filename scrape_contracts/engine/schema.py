"""The JSON Schema of a record: references resolve inside the contract only, never over the network.

jsonschema's default registry retrieves any remote ``$ref`` with urllib (no address guard, no timeout, no
size limit), at validation time. Here the registry holds the schema itself plus the published meta-schemas
and refuses every other URI, so ``#/$defs/...`` works and ``https://...`` is an error at load time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin

import referencing
import referencing.exceptions
import regex
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing.jsonschema import DRAFT202012

from scrape_contracts.engine.limits import DEFAULT_LIMITS
from scrape_contracts.engine.limits import SETTINGS as LIMIT_SETTINGS

# keywords whose values are data, not subschemas: a "$ref" key inside them is not a reference
_DATA_KEYWORDS = frozenset({"const", "enum", "examples", "default"})
_REF_KEYWORDS = ("$ref", "$dynamicRef")

LOCAL_ONLY_HINT = ("remote references are not fetched: copy the definition under $defs and refer to it as "
                   "'#/$defs/<name>'")


class RemoteReferenceRefused(Exception):
    pass


def _refuse(uri: str) -> referencing.Resource:
    raise RemoteReferenceRefused(f"{uri}: {LOCAL_ONLY_HINT}")


_REGISTRY: referencing.Registry = SPECIFICATIONS.combine(referencing.Registry(retrieve=_refuse))


@lru_cache(maxsize=8)
def _validator_class(regex_timeout_s: float) -> type:
    """Draft 2020-12 whose ``pattern`` stops after ``regex_timeout_s`` (jsonschema uses ``re``, which
    cannot be stopped: a schema pattern like ``^(a|a)+$`` would hold the run on a long value)."""

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "string"):
            return
        try:
            matched = regex.search(patrn, instance, timeout=regex_timeout_s) is not None
        except TimeoutError:
            yield ValidationError(
                f"pattern {patrn!r} took too long on a value of {len(instance):,} characters: limit "
                f"regex_timeout_s={regex_timeout_s} (setting {LIMIT_SETTINGS['regex_timeout_s']})")
            return
        if not matched:
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    return validators.extend(Draft202012Validator, {"pattern": pattern})


@lru_cache(maxsize=256)
def _validator_for_json(schema_json: str, regex_timeout_s: float) -> Draft202012Validator:
    return _validator_class(regex_timeout_s)(json.loads(schema_json), registry=_REGISTRY)


def record_validator(schema: Mapping[str, Any], regex_timeout_s: float = DEFAULT_LIMITS.regex_timeout_s
                     ) -> Draft202012Validator:
    """A validator for ``schema`` that never retrieves anything and bounds its patterns (cached)."""
    return _validator_for_json(json.dumps(schema, sort_keys=True, default=str), regex_timeout_s)


def _references(schema: Any) -> Iterator[tuple[str, str, str]]:
    """(base URI, reference, JSON pointer of the keyword) of every $ref/$dynamicRef, in document order."""
    stack: list[tuple[Any, str, str]] = [(schema, "", "")]
    while stack:
        node, base, pointer = stack.pop()
        if isinstance(node, dict):
            node_id = node.get("$id")
            if isinstance(node_id, str):
                base = urljoin(base, node_id)
            for keyword in _REF_KEYWORDS:
                if isinstance(node.get(keyword), str):
                    yield base, node[keyword], f"{pointer}/{keyword}"
            stack.extend((value, base, f"{pointer}/{key}") for key, value in reversed(node.items())
                         if key not in _DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend((value, base, f"{pointer}/{i}") for i, value in reversed(list(enumerate(node))))


def reference_problems(schema: Mapping[str, Any]) -> list[str]:
    """Every reference of ``schema`` that does not resolve inside it (or to a published meta-schema)."""
    resource = referencing.Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    root_uri = resource.id() or ""
    registry = _REGISTRY.with_resource(root_uri, resource).crawl()
    problems = []
    for base, ref, pointer in _references(schema):
        resolver = registry.resolver(base_uri=base or root_uri)
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            problems.append(f"$ref {ref!r} at {pointer or '/'} {describe_unresolvable(exc)}")
    return problems


def describe_unresolvable(exc: BaseException) -> str:
    """Why a reference did not resolve, for a person: a refused download, or nothing at that address."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, RemoteReferenceRefused):
            return f"points outside the contract; {LOCAL_ONLY_HINT}"
        cause = cause.__cause__ or cause.__context__
    return "does not resolve to anything in the schema"


def schema_problems(schema: Mapping[str, Any]) -> list[str]:
    """Everything wrong with ``schema`` as a record schema: every meta-schema error, then every reference
    that would need a download (the record validator is Draft 2020-12 whatever ``$schema`` says)."""
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA, registry=_REGISTRY,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)
    problems = []
    for error in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.path]):
        path = "/".join(str(p) for p in error.path) or "(root)"
        problems.append(f"at {path}: {error.message}")
    if problems:
        return problems
    return reference_problems(schema)
