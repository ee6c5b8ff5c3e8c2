"""A Python-SDK MCP server speaking 2026-07-28 over streamable HTTP (the gateway's upstream in
tests/mcp_python.rs). Usage: server.py PORT."""

import asyncio
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("py-modern", version="1.0.0")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Echoes its text."""
    return text


@server.tool()
def publish(id: str) -> str:
    """Publishes a note."""
    return f"published {id}"


@server.tool()
async def count(label: str, steps: int, ctx: Context) -> str:
    """Counts to steps, reporting progress with label as the message."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, label)
        await asyncio.sleep(0.05)
    return f"counted {steps}"


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
