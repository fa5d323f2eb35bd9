"""``roost results``: list the runs in the results store, newest last, filtered by model and host;
``roost results serve``: serve the reports over HTTP for the Prefect UI (``roost.report.serve``);
``roost results compact``: write a new runs catalog now (``roost.store.catalog``; runs compact it anyway);
``roost results push``: upload the results a run kept on this worker while the store was unreachable.

The store: ``--store URL`` (a directory or ``s3://BUCKET/PREFIX``; ``--credentials BLOCK`` names a Roost
Store Credentials block), else ``--dir``, else ``ROOST_RESULTS_STORE`` (+ ``ROOST_RESULTS_STORE_CREDENTIALS``),
else ``$ROOST_RESULTS_DIR`` (default ``./results``). Exit 0 (also for an empty store), 1 when the store
does not answer, 2 for a filter naming a model or host the store has never seen (the message lists the
ones it has), for a bad store URL, for a ``serve`` root that is not a directory or a port in use.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from roost.catalogue import fmt_value
from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.inputs.text import shown
from roost.settings import results_dir as default_results_dir

COLUMNS: list[tuple[str, str]] = [
    ("run_id", "run"),
    ("started_at", "started (UTC)"),
    ("profile", "profile"),
    ("repo_id", "model"),
    ("host_name", "host"),
    ("status", "status"),
    ("decode_tok_s", "decode tok/s"),
    ("ttft_s", "TTFT s"),
    ("decode_pct_of_ceiling", "% ceiling"),
    ("peak_output_tok_s", "peak tok/s"),
    ("knee_concurrency", "knee"),
    ("start_to_healthy_s", "cold start s"),
    ("note", "note"),
]
NUMERIC = {"decode_tok_s", "ttft_s", "decode_pct_of_ceiling", "peak_output_tok_s", "knee_concurrency", "start_to_healthy_s"}


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == "started_at":
        return str(value.strftime("%Y-%m-%d %H:%M"))
    if key == "knee_concurrency":
        return str(int(value))
    if key in NUMERIC:
        return fmt_value(float(value))
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "isoformat"):
        return None if str(value) == "NaT" else value.isoformat()
    return value


def render_table(rows: list[dict[str, Any]]) -> str:
    """Aligned plain-text columns; numbers right-aligned."""
    cells = [[_cell(k, r.get(k)) for k, _ in COLUMNS] for r in rows]
    heads = [h for _, h in COLUMNS]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]

    def line(values: list[str]) -> str:
        out = []
        for (key, _), v, w in zip(COLUMNS, values, widths, strict=True):
            out.append(v.rjust(w) if key in NUMERIC else v.ljust(w))
        return "  ".join(out).rstrip()

    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(c) for c in cells)])


def select_runs(df: Any, model: str | None, host: str | None, last: int | None) -> Any:
    """Filter a ``load_runs`` frame; an unknown model or host is a UserError naming the known ones."""
    from roost.store.layout import slug  # light, but its package imports pyarrow (CLI start time)

    if model is not None:
        keep = (
            (df["repo_id"] == model)
            | (df["model"] == slug(model))
            | (df["served_model_name"] == model)
            | (df["profile"] == model)
        )
        if not keep.any():
            known = sorted(set(df["repo_id"]) | set(df["profile"]))
            raise UserError(f"--model {model!r}: no runs for it in the results store; known: {', '.join(known)}")
        df = df[keep]
    if host is not None:
        keep = (df["host_name"] == host) | (df["host"] == slug(host))
        if not keep.any():
            raise UserError(f"--host {host!r}: no runs for it{' and that model' if model else ''}; "
                            f"known: {', '.join(sorted(set(df['host_name'])))}")
        df = df[keep]
    if last is not None:
        df = df.tail(last)
    return df


def results(
    ctx: typer.Context,
    model: Annotated[
        str | None, typer.Option("--model", help="Repo id (org/name), profile or served model name.")
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Host name, e.g. spark or cpu.")] = None,
    last: Annotated[int | None, typer.Option("--last", help="Only the latest N runs (after filtering).", min=1, max=10**9)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as a JSON list (every column).")] = False,
    results_dir: Annotated[
        Path | None,
        typer.Option("--dir", help="Results directory (default: $ROOST_RESULTS_DIR, else ./results)."),
    ] = None,
    store_url: Annotated[str | None, STORE_OPTION] = None,
    credentials: Annotated[str | None, CREDENTIALS_OPTION] = None,
) -> None:
    """List stored runs with their headline numbers, oldest first."""
    if ctx.invoked_subcommand is not None:  # `roost results serve`: the group's own listing does not run
        ctx.obj = {"dir": results_dir, "store": store_url, "credentials": credentials}
        return
    from roost.store import load_runs  # pyarrow and pandas: only when the command runs (CLI start time)

    store = open_for_cli(results_dir, store_url, credentials)
    df = load_runs(store)
    if df.empty:
        if as_json:
            echo_json([])
        else:
            typer.echo(f"no runs recorded yet in {store.url}")
        return
    df = select_runs(df, model, host, last)
    df = df.assign(note=[
        f"failed at {s}: {c}" if st != "completed" else ""
        for s, c, st in zip(df["failed_stage"], df["failure_class"], df["status"], strict=True)
    ])
    rows: list[dict[str, Any]] = df.to_dict(orient="records")
    if as_json:
        clean = [{k: _json_value(v) for k, v in r.items()} for r in rows]
        echo_json(clean)
    else:
        typer.echo(render_table(rows))
        typer.echo(f"\n{len(rows)} run(s) in {store.url}")


STORE_OPTION = typer.Option("--store", help="The results store: a directory or s3://BUCKET/PREFIX (default: "
                            "$ROOST_RESULTS_STORE, else --dir).")
CREDENTIALS_OPTION = typer.Option("--credentials", help="Roost Store Credentials block for an s3:// store (default: "
                                  "$ROOST_RESULTS_STORE_CREDENTIALS, else the AWS_* environment).")


def open_for_cli(results_dir: Path | None, store_url: str | None, credentials: str | None) -> Any:
    """The store a results command reads: --store (+ --credentials), --dir, the environment, ./results."""
    from roost.settings import environment
    from roost.store.location import CREDENTIALS_ENV, STORE_ENV, open_store

    if store_url is not None and results_dir is not None:
        raise UserError("--store and --dir name the same thing: give one")
    env = environment()
    if credentials is not None and store_url is None and not env.roost_results_store:
        raise UserError("--credentials goes with an s3:// --store (or ROOST_RESULTS_STORE)")
    if results_dir is not None:
        if results_dir.exists() and not results_dir.is_dir():
            raise UserError(f"--dir {shown(str(results_dir))}: not a directory; point it at a roost results directory")
        return open_store(results_dir.expanduser().resolve())
    url, field = (store_url, "--store") if store_url is not None else (env.roost_results_store or "", STORE_ENV)
    block = credentials if credentials is not None else env.roost_results_store_credentials or ""
    if not url.strip():
        default = default_results_dir()
        if default.exists() and not default.is_dir():
            raise UserError(f"ROOST_RESULTS_DIR {shown(str(default))}: not a directory; point it at a roost results "
                            "directory (or unset it for ./results)")
        return open_store(default)
    if block.strip():
        if not env.prefect_api_url:
            named_by = "--credentials" if credentials is not None else CREDENTIALS_ENV
            raise UserError(f"{named_by} names a Roost Store Credentials block on the Prefect server: set "
                            "PREFECT_API_URL to it, or leave it out to use the AWS_* environment")
        from blocks.store import open_results_store  # Prefect's client: only for a named credentials block

        return open_results_store(url, block.strip(), field)
    from roost.store.credentials import StoreCredentials

    return open_store(url, StoreCredentials.from_env(), field)


def compact(ctx: typer.Context) -> None:
    """Write a new runs catalog now, so that listings and baseline lookups read one object instead of many."""
    from roost.store import compact as compact_store

    opts = ctx.obj or {}
    store = open_for_cli(opts.get("dir"), opts.get("store"), opts.get("credentials"))
    key = compact_store(store)
    typer.echo(f"compacted the runs of {store.url} into {store.display(key)}" if key
               else f"{store.url}: the newest catalog already holds every run")


def push(ctx: typer.Context) -> None:
    """Upload the results runs on this worker kept locally while the store was unreachable."""
    from roost.store.fallback import pending_objects, push_pending

    opts = ctx.obj or {}
    store = open_for_cli(opts.get("dir"), opts.get("store"), opts.get("credentials"))
    if not pending_objects(store):
        typer.echo(f"nothing waits for {store.url} on this worker")
        return
    uploaded, present = push_pending(store)
    typer.echo(f"uploaded {uploaded} object(s) to {store.url} ({present} were there already)")


def serve(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on (e.g. the worker's tailnet address; "
                                      "0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port).")] = 8765,
    root: Annotated[
        Path | None,
        typer.Option("--root", help="Directory to serve (default: the reports of $ROOST_RESULTS_DIR, else "
                                    "./results/reports)."),
    ] = None,
) -> None:
    """Serve the run reports read-only over HTTP so the Prefect UI shows their charts and links."""
    from roost.report.serve import make_server, server_url

    opts = ctx.obj or {}
    if opts.get("store") is not None or opts.get("credentials") is not None:
        raise UserError("roost results serve serves the reports this worker rendered (they stay on its disk, "
                        "not in the store): leave out --store/--credentials, give --root or --dir")
    results_root = opts.get("dir")
    directory = root if root is not None else (results_root or default_results_dir()) / "reports"
    server = make_server(directory, bind, port)
    url = server_url(server, bind)
    typer.echo(f"ROOST_RESULTS_URL={url}")
    typer.echo(f"serving the reports in {directory.resolve()} read-only at {url}; set ROOST_RESULTS_URL={url} "
               "in the worker's environment (or results_url on the host profile); Ctrl-C stops", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def register(app: typer.Typer) -> None:
    group = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    group.callback(
        invoke_without_command=True,
        help="List stored runs and their headline numbers; filter by model and host. `roost results serve` "
             "serves the reports over HTTP for the Prefect UI.",
    )(user_errors(results))
    group.command("serve", help="Serve the run reports read-only over HTTP (the URL to set as ROOST_RESULTS_URL).")(
        user_errors(serve)
    )
    group.command("compact", help="Write a new runs catalog of the store now (runs do it as the store grows).")(
        user_errors(compact)
    )
    group.command("push", help="Upload the results kept on this worker while the store was unreachable "
                               "(`roost results --store URL push`; the next run does it too).")(user_errors(push))
    app.add_typer(group, name="results")
