"""A maintenance operator's ``__init__`` made from its job's option declarations: one keyword per option,
named in the signature (so Airflow's ``partial``/``expand`` and ``default_args`` know each), held as an
attribute of the declared name."""

from __future__ import annotations

import inspect
import warnings
from typing import Any, ClassVar

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk.exceptions import AirflowException

from airflow_delta_maint.app.job_definitions import JOBS, JobDefinition
from airflow_delta_maint.app.job_definitions.definition import NATIVE
from airflow_delta_maint.delta.errors import DeltaError
from airflow_delta_maint.operators.options import resolve_engine
from airflow_delta_maint.app.job_definitions.options import Option, former_name_warning

__all__ = ["JobOptions", "options_init", "warn_deprecated"]


def warn_deprecated(message: str) -> None:
    """A deprecation warning for a DAG author: a former option name (``AirflowProviderDeprecationWarning``)."""
    warnings.warn(message, AirflowProviderDeprecationWarning, stacklevel=3)


class JobOptions:
    """An operator's job and its options' values: ``job``, ``engine`` and the attributes its keywords set."""

    job: ClassVar[str] = ""
    engine: str | None

    @property
    def definition(self) -> JobDefinition:
        """The job this operator runs."""
        if self.job not in JOBS:
            raise AirflowException(f"the maintenance application has no job {self.job!r} (it offers: "
                                   f"{', '.join(JOBS)})")
        return JOBS[self.job]

    def job_values(self) -> dict[str, Any]:
        """The job's options as this operator holds them (rendered), and the engine's: typed values, no text."""
        job = self.definition
        try:
            values = job.options.from_operator(vars(self))
        except DeltaError as exc:
            raise AirflowException(str(exc)) from None
        engine = self.resolved_engine()
        if job.engine_option and (self.engine is not None or engine != NATIVE):
            values[job.engine_option] = engine
        return values

    def resolved_engine(self) -> str:
        """The engine of this run: ``engine``, else ``[delta_maint] engine``, else native."""
        return resolve_engine(self.engine)

    def job_params(self) -> dict[str, Any]:
        """Every option of the job (defaults included), parsed from :meth:`job_values`.

        :raises AirflowException: when an option is invalid (one line naming it).
        """
        try:
            return self.definition.parse(self.job_values())
        except DeltaError as exc:
            raise AirflowException(str(exc)) from None



def _keyword_default(option: Option) -> Any:
    """An option keyword's default on the operator: off for a flag, else unset (the job's own default applies)."""
    return False if option.kind == "bool" else None


def options_init(cls: type[Any], job: JobDefinition) -> Any:
    """The ``__init__`` of ``cls``: the job's option keywords (its signature names each, so Airflow's
    ``partial``/``expand`` and ``default_args`` know them), held as attributes, then the base's arguments."""
    keywords = job.options.keywords()
    # former keywords, taken for one release: former name -> the option it names now
    former = {f.name: o for o in keywords for f in o.former_names if f.keyword}

    def __init__(self: Any, **kwargs: Any) -> None:
        old = {name: kwargs.pop(name) for name in list(kwargs) if name in former}
        held = {o.attribute: kwargs.pop(o.keyword, _keyword_default(o)) for o in keywords}  # type: ignore[arg-type]
        for name, value in old.items():
            option = former[name]
            warnings.warn(f"{cls.__name__}: {former_name_warning(name, str(option.keyword))}",
                          AirflowProviderDeprecationWarning, stacklevel=2)
            if held[option.attribute] in (None, _keyword_default(option)):
                held[option.attribute] = value
        super(cls, self).__init__(**kwargs)
        for attribute, value in held.items():
            setattr(self, attribute, value)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(str(o.keyword), inspect.Parameter.KEYWORD_ONLY,
                                 default=_keyword_default(o)) for o in keywords]
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__name__}.__init__"
    __init__.__doc__ = f"The options of {job.name} as keywords (see the class docstring), then the base's."
    return __init__
