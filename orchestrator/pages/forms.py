"""The pages' one form body (sign-in), read strictly: what it cannot be is a 400 that
says what is wrong, never a 500 (more fields than ``parse_qs`` allowed raised
ValueError) nor a "token not accepted" for a form that held no usable token.

Pure: bytes and a content type in, fields or :class:`BadForm` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl

FORM_TYPE = "application/x-www-form-urlencoded"
#: Fields a form may carry besides its own (a browser sends only the form's; a password
#: manager may add one or two).
EXTRA_FIELDS = 4


class BadForm(ValueError):
    """The form body is not one this page takes; the message says what to fix."""


def _control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def read_form(body: bytes, content_type: str | None,
              fields: Mapping[str, int]) -> dict[str, str]:
    """The known ``fields`` of a urlencoded ``body`` (name -> most characters): each at
    most once, UTF-8, with no control character; unknown fields are ignored, up to
    :data:`EXTRA_FIELDS` of them. A body sent with no content type is read as the
    form; one sent as another type is refused."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind and kind != FORM_TYPE:  # none: a script's bare POST, read as the form
        raise BadForm(f"send the form as {FORM_TYPE}, not {kind!r}")
    most = len(fields) + EXTRA_FIELDS
    # Each character of a field may be sent as %XX (three bytes), and every field has
    # its name, '=' and '&' around it.
    limit = sum(3 * n + len(name) + 2 for name, n in fields.items()) + 64 * EXTRA_FIELDS
    if len(body) > limit:
        raise BadForm(f"the form is {len(body)} bytes, over the {limit}-byte limit")
    try:
        pairs = parse_qsl(body.decode("ascii"), keep_blank_values=True, encoding="utf-8",
                          errors="strict", max_num_fields=most)
    except UnicodeDecodeError as e:
        raise BadForm("the form is not UTF-8 text") from e
    except ValueError as e:  # more than max_num_fields
        raise BadForm(f"the form has more than {most} fields") from e
    out: dict[str, str] = {}
    for name, value in pairs:
        if name not in fields:
            continue
        if name in out:
            raise BadForm(f"the form gives {name!r} twice; send it once")
        if len(value) > fields[name]:
            raise BadForm(f"{name!r} is over {fields[name]} characters")
        if _control(value):
            raise BadForm(f"{name!r} holds a control character (such as NUL)")
        out[name] = value
    return out
