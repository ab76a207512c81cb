"""The class an environment author subclasses.

Its life cycle is the Go SDK's (core/sdk/envplugin): the host reads info and the
settings schema, decodes the env block against it and calls configure, asks
for the tasks, then for every episode calls new_episode, step per policy
reply until an observation is done, and end exactly once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from .sandbox import Sandbox
from .types import Block, Diagnostic, Message, Observation, Setting, Task


@dataclass
class Config:
    """Where the env block came from."""

    name: str      # the block label: "coding" in env "coding" { ... }
    base_dir: str  # directory of the job file
    run_id: str

    def path(self, p: str) -> str:
        """Resolves p relative to the job file, as users expect."""
        if not p or os.path.isabs(p) or not self.base_dir:
            return p
        return os.path.join(self.base_dir, p)


@dataclass
class Episode:
    """One running episode. state is the author's: keep per-episode data
    there (attempt counters, parsed task data)."""

    id: str
    task: Task
    sandbox: Optional[Sandbox]
    seed: int
    group: int
    index: int
    state: Dict[str, Any] = field(default_factory=dict)


class Env:
    """Subclass this, set name, version and settings, and override the
    methods. Methods may be called from several threads at once (the host
    runs episodes concurrently); per-episode data belongs in Episode.state.

    An exception raised in tasks, new_episode, step or end fails that call
    only: the host records the episode as an error and the plugin keeps
    serving. An exception in configure becomes a diagnostic on the block.
    """

    name: str = "python-env"
    version: str = "0.0.0"
    description: str = ""
    # True when episodes run no commands (a judge, a pure-text game): the
    # job then needs no sandbox block and episode.sandbox is None. The Go
    # SDK's pluginbase.Info.NoSandbox.
    no_sandbox: bool = False
    # The env block's own settings: {"tasks": Setting(str, default="x")}.
    settings: Dict[str, Union[Setting, Block]] = {}

    def configure(self, settings: Dict[str, Any], config: Config) -> Optional[List[Diagnostic]]:
        """Receives the env block's settings, already decoded and type-checked
        by the host (defaults filled in). Return diagnostics, or raise
        ConfigError, to reject values; each names the setting's path so the
        user sees the file, line and column."""
        return None

    def tasks(self) -> List[Task]:
        """Every task of the configured dataset, in a stable order."""
        raise NotImplementedError("tasks")

    def new_episode(self, episode: Episode) -> Union[Observation, str, Message]:
        """Starts an episode and returns the first observation (a bare string
        is a user prompt). episode.sandbox is lent for this episode only."""
        return Observation(messages=[Message("user", episode.task.prompt)])

    def step(self, episode: Episode, reply: Message) -> Union[Observation, str, Message]:
        """Takes the policy's reply; returns what the policy sees next, or an
        Observation with done=True and the reward."""
        raise NotImplementedError("step")

    def end(self, episode: Episode, reason: str) -> Optional[Observation]:
        """Called exactly once per episode. reason is "" after a done step,
        otherwise why the host stopped it (max_turns, timeout, cancelled,
        error); the env may return a final reward. The sandbox is still
        usable here and released after."""
        return None
