"""The `llmop` command: its subcommands by name, each imported only when it runs."""

from __future__ import annotations

import os
import signal
from importlib import import_module
from types import FrameType

import click

from llm_operator import __version__

# `llmop --help` lists commands in this order, the one a newcomer needs them in; each is
# "module:attribute", so that `llmop status` or an init container's `llmop model-fetch`
# imports its own module, not every command's (the whole set took 1.1 s to import).
COMMANDS = {
    "up": "llm_operator.cli.local:up",
    "chat": "llm_operator.cli.chat:chat",
    "status": "llm_operator.cli.local:status",
    "down": "llm_operator.cli.local:down",
    "validate": "llm_operator.cli.documents:validate",
    "plan": "llm_operator.cli.plan:plan_cmd",
    "render": "llm_operator.cli.documents:render_cmd",
    "models": "llm_operator.cli.models:models",
    "crd": "llm_operator.cli.documents:crd_cmd",
    "operator": "llm_operator.cli.operator:operator",
    "router": "llm_operator.cli.router:router",
    "gateway": "llm_operator.cli.gateway:gateway",
    "mcp": "llm_operator.cli.mcp:mcp",
    "keys": "llm_operator.cli.keys:keys",
    "model-image": "llm_operator.cli.model_image:model_image",
    "model-fetch": "llm_operator.cli.fetch:model_fetch",
    "model-verify": "llm_operator.cli.verify:model_verify",
    "pool-reload": "llm_operator.cli.pool_reload:pool_reload",
    "lora-sync": "llm_operator.cli.lora_sync:lora_sync",
    "setup": "llm_operator.cli.local:setup",
}


class Commands(click.Group):
    """Commands imported by name when used, listed in COMMANDS' order, each summary whole."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(import_module(module), attribute)
        assert isinstance(command, click.Command), target
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(limit=200))
                for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=Commands,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmop")
def cli() -> None:
    """llm-operator: large language models as Kubernetes resources, or on this machine.

    \b
    On this machine, no cluster needed:
      llmop up                    serve examples/local (Gemma 3 270M) until Ctrl-C
      llmop chat                  talk to it in the terminal
    \b
    For a cluster, describe a model once as an LLMModel (ai.example.io/v1alpha1), then:
      llmop validate -f config/samples/      check documents, with field paths
      llmop plan -f config/samples/          will it fit? memory and accelerators
      llmop render -f model.yaml | kubectl apply -f -
      llmop crd > llmmodels-crd.yaml         the CustomResourceDefinition
    """


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)  # what the kernel does to any other process: no cleanup


def main() -> None:
    # In a container `llmop` is PID 1, and the kernel delivers no signal to PID 1 that it
    # does not handle. The commands that serve handle SIGTERM once their loop runs, but a
    # pod deleted while its command is still importing (a second or more: a rollout or a
    # scale-down that catches a starting pod) ignored it and lived out its whole grace
    # period (the router's: 330 s, holding its CPU request all along). Until a
    # command installs its own handler, SIGTERM ends the process as it would elsewhere.
    if os.getpid() == 1:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    cli(prog_name="llmop")
