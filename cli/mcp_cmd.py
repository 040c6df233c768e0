"""`zym mcp`: serve zym's analysis to coding agents as MCP tools over stdio."""
from __future__ import annotations

import typer

from .errors import exit_on_error


def mcp() -> None:
    """Serve the analysis, findings and diff of captures as MCP tools over stdin/stdout (the
    Model Context Protocol), for coding agents; each tool returns what the matching command
    prints with --format json. Needs the MCP SDK: pip install 'zym[mcp]'.

    Tools: analyze(path, window, top), findings(path, window), diff(before, after, window,
    top, repeat), and those of installed extensions (zym.fleet, the zym.mcp_tools entry points).

    Example: claude mcp add zym -- zym mcp
    """
    with exit_on_error():
        try:
            import mcp.server.mcpserver  # noqa: F401 (the SDK: say how to get it if missing)
            from zym.analysis.export.agent import serve_stdio
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("mcp"):
                raise
            from zym.schemas.errors import InputError

            raise InputError("zym mcp needs the MCP Python SDK: pip install 'zym[mcp]' "
                             "(or pip install 'mcp>=2,<3')") from None
    serve_stdio()


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
