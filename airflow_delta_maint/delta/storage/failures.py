"""Object-store failures as one-line errors that name the table and the cause.

obstore's exceptions carry the whole client debug dump (request, retries, response body, a Rust
``Debug`` tree: 40 lines for an unreachable endpoint). The user sees one sentence; the raw text
goes to the debug log.
"""

from __future__ import annotations

import logging
import re

from airflow_delta_maint.delta.errors import StorageError

log = logging.getLogger("delta_maint.storage")

_BUCKET_CODES = ("NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist",
                 "The specified container does not exist")
_DENIED_CODES = ("AccessDenied", "AuthorizationPermissionMismatch", "AuthorizationFailure",
                 "InsufficientAccountPermissions", "does not have storage.objects", "Forbidden")
#: a connection that broke after the request went out (obstore does not repeat a conditional put then)
_RESET = re.compile(r"ConnectionReset|[Cc]onnection reset|connection closed before message completed|"
                    r"IncompleteMessage|BrokenPipe|request or response body error")
_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthenticationFailed",
                     "InvalidAuthenticationInfo", "ExpiredToken", "InvalidToken", "InvalidClientTokenId",
                     "invalid_grant", "UnrecognizedClientException")


def _status(text: str) -> int | None:
    match = re.search(r"status code: (\d{3})", text) or re.search(r"status: (\d{3})", text)
    return int(match.group(1)) if match else None


def _endpoint(text: str) -> str | None:
    match = re.search(r"Error performing [A-Z]+ (\w+://[^/\s?]+)", text) or re.search(r"uri: Some\(\s*(\w+://[^/\s?]+)", text)
    return match.group(1) if match else None


def _request(text: str) -> tuple[str, str] | None:
    """(method, URL without its query) of the request a failure names, if it names one."""
    match = re.search(r"Error performing ([A-Z]+) (\w+://[^\s?]+)", text)
    return (match.group(1), match.group(2)) if match else None


def _answer(text: str, status: int) -> str:
    """The store's answer: its status, its error code (``<Code>`` of S3 and Azure bodies), the retries."""
    code = re.search(r"<Code>(\w+)</Code>", text) or re.search(r"x-ms-error-code[\"':\s]+(\w+)", text)
    retries = re.search(r"after (\d+) retries", text)
    return (f"answered HTTP {status}{f' {code.group(1)}' if code else ''}"
            f"{f' after {retries.group(1)} retries' if retries else ''}")


def _code(text: str, codes: tuple[str, ...]) -> str | None:
    for code in codes:
        if code in text:
            return code
    return None


def describe(exc: BaseException, family: str) -> str | None:
    """The cause of an object-store failure in a few words, or None when it is not a store failure
    worth translating (a missing object, an object that already exists)."""
    text = str(exc)
    name = type(exc).__name__
    if name in ("AlreadyExistsError", "PreconditionError", "NotModifiedError", "NotImplementedError",
                "NotSupportedError"):
        return None
    code = _code(text, _BUCKET_CODES)
    if code:
        what = {"azure": "container", "gcs": "bucket"}.get(family, "bucket")
        return f"the {what} does not exist ({code})"
    if name == "FileNotFoundError" or name == "NotFoundError":
        if family == "gcs" and "list" in text.lower() and _status(text) == 404:
            return "the bucket does not exist (HTTP 404 on listing)"
        return None
    endpoint = _endpoint(text) or "the endpoint"
    if "BadScheme" in text or ("builder error" in text and endpoint.startswith("http://")):
        prefix = {"azure": "AZURE", "gcs": "GOOGLE"}.get(family, "AWS")
        return (f"{endpoint} is plain http, which is refused unless allowed "
                f"(set {prefix}_ALLOW_HTTP=true or the storage option allow_http=true)")
    if "Connection refused" in text or "ConnectionRefused" in text:
        return f"cannot reach {endpoint} (connection refused)"
    if "dns error" in text or "failed to lookup address" in text:
        return f"cannot reach {endpoint} (host name does not resolve)"
    request = _request(text)
    if _RESET.search(text):
        where = f"{request[0]} {request[1]}: " if request else ""
        return f"{where}the connection was reset before the whole answer arrived"
    if re.search(r"timed out|TimedOut|operation timed out|deadline has elapsed", text):
        return f"cannot reach {endpoint} (timed out)"
    if "error sending request" in text or "tcp connect error" in text:
        return f"cannot reach {endpoint} (connection failed)"
    code = _code(text, _CREDENTIAL_CODES)
    if code or name == "UnauthenticatedError" or _status(text) == 401:
        return f"the credentials were rejected ({code or 'HTTP 401'})"
    code = _code(text, _DENIED_CODES)
    if code or name == "PermissionDeniedError" or _status(text) == 403:
        return f"permission denied ({code or 'HTTP 403'})"
    if name == "UnknownConfigurationKeyError":
        match = re.search(r"[Cc]onfiguration key:? '?\"?([\w.-]+)", text)
        return f"unknown storage option {match.group(1) if match else ''}".rstrip()
    status = _status(text)
    if request and status:
        return f"{request[0]} {request[1]} {_answer(text, status)}"
    first = text.split("\n", 1)[0]
    first = re.sub(r"\s*-\s*Server returned non-2xx status code:.*", "", first)
    first = re.sub(r": <\?xml.*", "", first)
    if len(first) > 200:
        first = first[:197] + "..."
    return f"{first}{f' (HTTP {status})' if status and str(status) not in first else ''}"


def translate(exc: BaseException, root: str, family: str, action: str, key: str | None = None) -> BaseException:
    """The exception to raise instead of ``exc``: a StorageError, or ``exc`` itself when callers
    expect it (missing object, object already exists). ``key``: the object the request was for, named
    when the store's failure does not name the request."""
    if isinstance(exc, StorageError):
        return exc
    cause = describe(exc, family)
    if cause is None:
        return exc
    log.debug("object store error while %s %s: %s: %s", action, root, type(exc).__name__, exc)
    if key and cause.startswith("the connection was reset"):
        cause = f"{key}: {cause}"
    return StorageError(f"cannot {action} {root}: {cause}")
