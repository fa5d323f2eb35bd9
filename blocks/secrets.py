"""Prefect Secret blocks roost reads, and the Hub token's one precedence.

:func:`hub_token` is the only place that decides which Hub token a run, a stage or a command uses:

1. a token given explicitly;
2. the Prefect Secret block a model profile names (``hf_token_secret``), when it names one;
3. ``HF_TOKEN``, else ``HUGGING_FACE_HUB_TOKEN`` (``roost.settings.hub_token_env``);
4. the token ``hf auth login`` stored; else none (anonymous).

Steps 3 and 4 are the domain's (``roost.hub._endpoint.resolve_token``: the Prefect-free tail a caller
without a profile gets by passing no token); the Secret block is Prefect's, so the whole order lives
here, in the Prefect layer. The token is checked (no whitespace inside, no control or non-ASCII
character) and never appears in a log line, an error or an output.
"""

from __future__ import annotations

from typing import cast

from prefect.blocks.system import Secret

from roost.errors import UserError
from roost.hub._endpoint import resolve_token


def secret_value(secret_block: str, holding: str) -> str | None:
    """The value of the Prefect Secret block ``secret_block`` (None when it is empty); a UserError naming
    the block and what it should hold (``holding``) when there is none of that name."""
    try:
        secret = cast("Secret[str]", Secret.load(secret_block))
    except ValueError:
        raise UserError(
            f"Prefect Secret block {secret_block!r} not found: create it (prefect block create secret, "
            f"or Secret(value=...).save(name)) holding {holding}"
        ) from None
    value = secret.get()
    return str(value) if value else None


def token_from(secret_block: str | None) -> str | None:
    """The HF token in the Prefect Secret block ``secret_block``; None when no block is named or it is
    empty (the Hub token then comes from ``HF_TOKEN`` or the stored login, or the access is anonymous)."""
    return secret_value(secret_block, "a Hugging Face read token") if secret_block else None


def hub_token(secret_block: str | None = None, token: str | None = None) -> str | None:
    """The Hub token by roost's one precedence (module docstring): ``token``, else the Secret block
    ``secret_block`` names, else ``HF_TOKEN``, else ``HUGGING_FACE_HUB_TOKEN``, else the stored login;
    None for anonymous access. A token that cannot be one is a UserError that does not show it."""
    return resolve_token(token or token_from(secret_block))
