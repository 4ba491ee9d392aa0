"""``.. airflow-gpu-output:: catalog`` renders what the command prints, so the docs never go stale."""

from __future__ import annotations

import shlex
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


class CommandOutput(SphinxDirective):
    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        from airflow_gpu import cli

        argv = shlex.split(self.arguments[0])
        text = f"$ airflow-gpu {self.arguments[0]}\n{cli.run(argv)}"
        return [nodes.literal_block(text, text, language="text")]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("airflow-gpu-output", CommandOutput)
    return {"parallel_read_safe": True}
