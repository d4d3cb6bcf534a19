"""A job's options, each declared once: name, type, default, help, and how the doors show it.

From one :class:`Option` come the command-line flag and its parsing (:meth:`OptionSet.add_to`), the
operator's keyword argument and its template field, the values a fleet's per-job mapping gives
(:meth:`OptionSet.parse`, one message naming the option for a bad value, whichever door it came in by),
the arguments the hook hands the application (:meth:`OptionSet.to_argv`, once, when it builds the
spark-submit command) and the options table in the docs (:meth:`OptionSet.doc_rows`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_delta_maint.delta.errors import InvalidArgumentError
from airflow_delta_maint.delta.option_values import as_bool

__all__ = ["KINDS", "FormerName", "Option", "OptionSet", "former_name_warning"]

#: the value types an option may have
KINDS = ("str", "int", "float", "bool")
_CONVERT: dict[str, Callable[[Any], Any]] = {"str": str, "int": int, "float": float}


@dataclass(frozen=True)
class FormerName:
    """A name an option had before, still accepted for one release with a deprecation warning.

    Attributes:
        name: the former name, as a fleet's per-job mapping (and, with ``keyword``, the operator) gave it.
        flag: the former command-line flag (default ``--`` and the name with dashes; None: it had none).
        keyword: the operators still take it as a keyword argument (its value unchanged).
        value: turns a value given by the former name into the option's (None: the same value).
        takes_value: the former flag took a value (False: a flag without one, given as True to ``value``).
    """

    name: str
    flag: str | None = ""
    keyword: bool = False
    value: Callable[[Any], Any] | None = None
    takes_value: bool = True

    def __post_init__(self) -> None:
        if self.flag == "":
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))

    def converted(self, value: Any) -> Any:
        """``value`` given by the former name, as the option's."""
        return self.value(value) if self.value is not None else value


def former_name_warning(former: str, current: str) -> str:
    """The one-line warning for a former name."""
    return f"{former} is deprecated and will be removed in the next release; use {current}"


def _warn_on_stderr(message: str) -> None:
    sys.stderr.write(f"delta-maint: warning: {message}\n")


class _FormerFlag(argparse.Action):
    """A former flag: warns on stderr (one line) and sets the option's value."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, option: Option, former: FormerName,
                 **kwargs: Any) -> None:
        self.option, self.former = option, former
        super().__init__(option_strings, dest, nargs=None if former.takes_value else 0, default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS, metavar=option.metavar, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _warn_on_stderr(former_name_warning(str(self.former.flag), self.option.flag))
        try:
            value = self.option.convert(self.former.converted(values if self.former.takes_value else True),
                                        parser.prog.split()[-1])
        except InvalidArgumentError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, value)


@dataclass(frozen=True)
class Option:
    """One option of a job.

    Attributes:
        name: the parsed value's key, as the job's typed options read it.
        kind: ``str``, ``int``, ``float`` or ``bool`` (a flag without a value on the command line).
        help: one sentence for ``--help``, the operator's docstring and the docs.
        default: the value when the option is not given.
        choices: the values allowed, if only some are.
        flag: the command-line flag (default ``--`` and the name with dashes).
        metavar: the value's placeholder in ``--help``.
        keyword: the operator's keyword argument (default the name; None: the option has no keyword of its
            own, such as ``engine``, which every operator takes).
        attribute: the operator's attribute holding it (default the keyword; ``dry_run`` is held as
            ``dry_run_only``, as an attribute named ``dry_run`` would hide ``BaseOperator.dry_run()``).
        templated: the operator renders the keyword's value as a template.
        in_docs: listed in the docs' options table.
        former_names: names (and flags) the option had before, accepted for one release with a warning.
    """

    name: str
    kind: str
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    flag: str = ""
    metavar: str | None = None
    keyword: str | None = ""
    attribute: str = ""
    templated: bool = True
    in_docs: bool = True
    former_names: tuple[FormerName, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if self.keyword == "":
            object.__setattr__(self, "keyword", self.name)
        if not self.attribute and self.keyword:
            object.__setattr__(self, "attribute", self.keyword)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """This option's flag on ``parser`` (and its former flags, hidden, each warning when given)."""
        if self.kind == "bool":
            parser.add_argument(self.flag, dest=self.name, action="store_true", help=self.help)
        else:
            parser.add_argument(self.flag, dest=self.name, type=_CONVERT[self.kind], default=self.default,
                                choices=list(self.choices) if self.choices else None, metavar=self.metavar,
                                help=self.help)
        for former in self.former_names:
            if former.flag:
                parser.add_argument(former.flag, dest=self.name, action=_FormerFlag, option=self, former=former)

    def convert(self, value: Any, job: str) -> Any:
        """``value`` (as the operator or a fleet mapping gives it: a string from a template, a number, a list)
        in this option's type; a bad one raises one message naming the option."""
        if value is None or (isinstance(value, str) and not value.strip() and self.kind != "str"):
            return False if self.kind == "bool" else self.default
        try:
            if self.kind == "bool":
                return as_bool(value)
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            if self.kind == "int" and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            converted = _CONVERT[self.kind](value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"invalid options for {job}: {self.name} must be "
                                       f"{'a whole number' if self.kind == 'int' else 'a ' + self.kind}, "
                                       f"got {value!r}") from None
        if self.choices and converted not in self.choices and str(converted).strip().lower() in self.choices:
            converted = str(converted).strip().lower()
        if self.choices and converted not in self.choices:
            raise InvalidArgumentError(f"invalid options for {job}: {self.name} must be one of "
                                       f"{', '.join(self.choices)}, got {value!r}")
        return converted

    def argv(self, value: Any) -> list[str]:
        """The application's arguments for ``value`` (a converted one): none at the default."""
        if self.kind == "bool":
            return [self.flag] if value else []
        if value is None or value == self.default:
            return []
        if isinstance(value, float) and value.is_integer():
            return [self.flag, str(int(value))]
        return [self.flag, str(value)]


@dataclass(frozen=True)
class OptionSet:
    """A job's options, in the order ``--help`` lists them."""

    options: tuple[Option, ...] = field(default_factory=tuple)

    def __iter__(self) -> Iterator[Option]:
        return iter(self.options)

    def __getitem__(self, name: str) -> Option:
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(name)

    def names(self) -> list[str]:
        return [o.name for o in self.options]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Every option's flag on ``parser``."""
        for option in self.options:
            option.add_to(parser)

    def defaults(self) -> dict[str, Any]:
        """Every option at its default, as the command line parses no flag."""
        return {o.name: (False if o.kind == "bool" else o.default) for o in self.options}

    def former_names(self) -> dict[str, tuple[Option, FormerName]]:
        """Each former name (as a mapping's key) and the option it names now."""
        return {f.name: (o, f) for o in self.options for f in o.former_names}

    def parse(self, values: Mapping[str, Any], job: str,
              warn: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Every option's value (defaults for those not in ``values``), as the command line would parse them.

        A former name is taken for one release: ``warn`` (default: one line on stderr) gets its deprecation
        warning.

        Raises:
            InvalidArgumentError: an unknown option, or a value of the wrong type, naming the option.
        """
        by_keyword = {o.keyword: o for o in self.options if o.keyword and o.keyword != o.name}
        former = self.former_names()
        unknown = sorted(set(values) - set(self.names()) - set(by_keyword) - set(former))
        if unknown:
            raise InvalidArgumentError(f"invalid options for {job}: unknown {', '.join(unknown)} "
                                       f"(options: {', '.join(self.names()) or 'none'})")
        parsed = self.defaults()
        given: set[str] = set()
        for key, value in sorted(values.items(), key=lambda kv: kv[0] not in former):  # former names first
            if key in former:
                option, name = former[key]
                (warn or _warn_on_stderr)(f"{job}: {former_name_warning(name.name, option.name)}")
                value = name.converted(value)
            else:
                found = by_keyword.get(key) if key not in self.names() else self[key]
                assert found is not None
                option = found
            converted = option.convert(value, job)
            if key in former and option.name in given:
                continue
            parsed[option.name] = converted
            given.add(option.name)
        return parsed

    def to_argv(self, values: Mapping[str, Any], job: str, warn: Callable[[str], None] | None = None) -> list[str]:
        """The application's arguments for ``values`` (parsed first: a bad value raises, naming the option)."""
        parsed = self.parse(values, job, warn)
        return [arg for o in self.options for arg in o.argv(parsed[o.name])]

    def keywords(self) -> list[Option]:
        """The options an operator takes as keyword arguments."""
        return [o for o in self.options if o.keyword]

    def template_fields(self) -> tuple[str, ...]:
        """The operator attributes rendered as templates."""
        return tuple(o.attribute for o in self.keywords() if o.templated)

    def from_operator(self, held: Mapping[str, Any]) -> dict[str, Any]:
        """The options' values from an operator's attributes (``held``: attribute -> value, rendered)."""
        out: dict[str, Any] = {}
        for option in self.keywords():
            value = held.get(option.attribute)
            if value is not None and not (option.kind == "bool" and value is False):
                out[option.name] = value
        return out

    def doc_rows(self) -> list[tuple[str, str, str, str, str]]:
        """(operator keyword, flag, type, default, help) of each documented option."""
        rows = []
        for o in self.options:
            if not o.in_docs:
                continue
            kind = o.kind if not o.choices else " | ".join(o.choices)
            default = "off" if o.kind == "bool" else ("none" if o.default in (None, "") else f"`{o.default}`")
            text = o.help
            if o.former_names:
                former = [f"`{n}`" for f in o.former_names for n in (f.name, f.flag) if n]
                text += f" (formerly {', '.join(former)}: deprecated, removed in the next release)"
            rows.append((f"`{o.keyword}`" if o.keyword else "", f"`{o.flag}`", kind, default, text))
        return rows


def options(*declared: Option) -> OptionSet:
    """An :class:`OptionSet` of ``declared``; names and flags must be unique."""
    names = [o.name for o in declared] + [f.name for o in declared for f in o.former_names]
    flags = [o.flag for o in declared] + [f.flag for o in declared for f in o.former_names if f.flag]
    for seen in (names, flags):
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            raise ValueError(f"declared twice: {', '.join(twice)}")
    return OptionSet(tuple(declared))


def flags_of(sets: Sequence[OptionSet]) -> set[str]:
    """Every flag the sets declare."""
    return {o.flag for s in sets for o in s}
