"""``memory-core cortex-double``: serve a CortexDB double on loopback, so any process can use it as a server.

```
memory-core cortex-double --wire direct --port 3141    # Direct routes (v1/…)
memory-core cortex-double --wire hosted --port 0       # TinyHumans routes (memory/…) on a free port
MEMORY_CORE_CORTEXDB_KEY=any memory-core conformance --engine cortexdb+http://127.0.0.1:3141
```

The double is ``memory_core.engines.cortexdb.double`` behind the stdlib HTTP server: the same log, rules and fault
knobs as in process, plus ``GET /_seen`` (every request, bearer left out) and ``POST /_knobs``. It accepts any
non-blank bearer unless ``--accept-token`` names one. Exit code 2 on a bad option (naming it).
"""

from __future__ import annotations

from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.engines.cortexdb.auth import is_loopback
from memory_core.engines.cortexdb.double import DoubleServer, direct_double, hosted_double

__all__ = ["cortex_double"]

_WIRES = {
    "direct": ("cortexdb+http", "MEMORY_CORE_CORTEXDB_KEY"),
    "hosted": ("tinyhumans+http", "MEMORY_CORE_TINYHUMANS_TOKEN"),
}


@app.command("cortex-double")
def cortex_double(
    wire: Annotated[str, typer.Option("--wire", help="direct (CortexDB v1/…) or hosted (TinyHumans memory/…).")] = (
        "direct"
    ),
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on; 0 picks a free one.", min=0, max=65535)
    ] = 3141,
    host: Annotated[str, typer.Option("--host", help="Loopback address to listen on.")] = "127.0.0.1",
    accept_token: Annotated[
        str | None, typer.Option("--accept-token", help="Accept only this bearer (default: any non-blank one).")
    ] = None,
) -> None:
    """Serve a CortexDB double (Direct or TinyHumans) over HTTP on loopback until interrupted."""
    if wire not in _WIRES:
        raise typer.BadParameter(f"{wire!r} is not direct or hosted", param_hint="--wire")
    if not is_loopback(host):
        raise typer.BadParameter(f"{host!r} is not a loopback address", param_hint="--host")
    double = direct_double() if wire == "direct" else hosted_double()
    double.knobs.accept_token = accept_token
    server = DoubleServer(double, host, port)
    scheme, variable = _WIRES[wire]
    engine_url = f"{scheme}://{server.url.removeprefix('http://')}"
    typer.echo(f"serving the CortexDB {wire} double on {server.url}", nl=True)
    typer.echo(f"engine URL: {engine_url} (set {variable} to any non-blank key)")
    typer.echo("GET /_seen lists every request; POST /_knobs sets fault knobs; Ctrl-C stops")
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()
