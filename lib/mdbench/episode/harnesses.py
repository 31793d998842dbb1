"""The seed's coding-agent harnesses — Codex and OpenCode — as episode agents, unmodified, behind the metering proxy.

:func:`harness_launch` prepares one run of a pinned CLI (installed by ``make agent-harnesses`` /
``scripts/agent_harnesses.sh`` into ``.agent-harnesses/``; nothing is installed at run time):

* the command line, non-interactive, with the prompt passed exactly as given (``codex exec … PROMPT``;
  ``opencode run … PROMPT``), stdin closed;
* the CLI's configuration written into the agent's private ``HOME`` (``.codex/config.toml``;
  ``.config/opencode/opencode.json``): the model provider is the proxy at ``http://127.0.0.1:PORT/v1`` (Codex:
  Responses API; OpenCode: chat completions through ``@ai-sdk/openai-compatible``), approvals off and the CLI's own
  sandbox off (``danger-full-access`` / ``edit`` and ``bash`` allowed, ``webfetch`` denied) — the OS sandbox is the
  confinement, and the CLI must run shell commands inside it; update checks, telemetry and sharing off;
* the environment (a per-episode proxy token — never the endpoint's key), the read-only install folder and the
  loopback port the sandbox must open inside the agent's network namespace;
* ``start(listeners)`` serves :class:`~mdbench.llm.proxy.MeteringProxy` on those sockets; ``stop()`` ends it, and
  converts its log (``EP/llm/calls.jsonl``) into ``EP/trajectory.json`` (ATIF) and returns tokens, USD, calls and
  the cap that cut the agent off, if any.

A missing CLI or another version raises :class:`HarnessUnavailable` with the install command (the runner records
``infrastructure_blocked``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError, MdbenchError
from mdbench.llm.prices import PriceTable
from mdbench.llm.proxy import Caps, MeteringProxy, RetryPolicy
from mdbench.llm.trajectory import write_trajectory
from mdbench.paths import PROJECT_ROOT

log = logging.getLogger(__name__)

#: Pinned versions (``scripts/agent_harnesses.sh`` installs exactly these).
VERSIONS = {"codex": "0.171.0", "opencode": "1.18.33"}
#: The port the proxy listens on inside the agent's network namespace (its own: no clash between episodes).
PROXY_PORT = 4141
INSTALL_CMD = "make agent-harnesses   (or: scripts/agent_harnesses.sh)"
#: Default per-episode caps (override with ``mdbench episode run --max-tokens/--max-usd`` =
#: harness_launch(max_tokens=…, max_usd=…), else the environment variables MDBENCH_LLM_MAX_TOKENS /
#: MDBENCH_LLM_MAX_USD: see :func:`episode_caps`).
DEFAULT_MAX_TOKENS = 200_000_000
DEFAULT_MAX_USD = 200.0
PROXY_TOKEN_ENV = "MDBENCH_PROXY_TOKEN"


class HarnessUnavailable(MdbenchError):
    """The harness CLI is not installed here, or not the pinned version; the message has the install command."""


def harness_root() -> Path:
    """Where the CLIs are installed: ``$MDBENCH_AGENT_HARNESSES`` or ``.agent-harnesses/`` of the checkout."""
    return Path(os.environ.get("MDBENCH_AGENT_HARNESSES") or PROJECT_ROOT / ".agent-harnesses").resolve()


def _package_version(pkg_dir: Path) -> str | None:
    try:
        data = json.loads((pkg_dir / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("version") if isinstance(data, dict) else None


def find_cli(name: str, root: Path | None = None) -> tuple[Path, str]:
    """(native binary, version) of the pinned harness CLI; :class:`HarnessUnavailable` when missing or other."""
    if name not in VERSIONS:
        raise InputError(f"--harness {name!r} is not known; choose one of {', '.join(sorted(VERSIONS))}")
    root = root or harness_root()
    nm = root / "node_modules"
    if name == "codex":
        pkg, binary = nm / "@openai" / "codex", None
        vendor = nm / "@openai" / "codex-linux-x64" / "vendor"
        cands = sorted(vendor.glob("*/bin/codex")) if vendor.is_dir() else []
        binary = cands[0] if cands else None
    else:
        pkg = nm / "opencode-ai"
        cands = [pkg / "bin" / "opencode.exe", nm / "opencode-linux-x64" / "bin" / "opencode",
                 nm / "opencode-linux-x64-baseline" / "bin" / "opencode"]
        binary = next((c for c in cands if c.is_file() and os.access(c, os.X_OK)
                       and c.stat().st_size > 1_000_000), None)
    version = _package_version(pkg)
    want = VERSIONS[name]
    if version is None or binary is None:
        raise HarnessUnavailable(f"the {name} CLI is not installed in {root} (no {pkg.name} package or no native "
                                 f"binary); install the pinned version with: {INSTALL_CMD}")
    if version != want:
        raise HarnessUnavailable(f"the {name} CLI in {root} is version {version}, mdbench pins {want}; "
                                 f"reinstall with: {INSTALL_CMD}")
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HarnessUnavailable(f"the {name} CLI at {binary} does not run ({exc}); reinstall with: "
                                 f"{INSTALL_CMD}") from None
    if want not in out.stdout:
        raise HarnessUnavailable(f"the {name} CLI at {binary} reports {out.stdout.strip()[:80]!r}, not {want}; "
                                 f"reinstall with: {INSTALL_CMD}")
    return binary, version


# -------------------------------------------------------------------------------------------- configs

def _toml_str(s: str) -> str:
    return json.dumps(s)   # a JSON string is a valid TOML basic string


def codex_config(model: str, proxy_url: str, reasoning: str | None, *, buffered: bool = False) -> str:
    """``~/.codex/config.toml``: the proxy as the only provider (Responses API), no approvals, no own sandbox.

    ``buffered``: the proxy answers only once the whole (translated) answer is in, so Codex waits up to an hour
    for the first event instead of its default 5 minutes.
    """
    lines = [
        "# written by mdbench (episode harness): the model is reached only through the evaluator's proxy",
        f"model = {_toml_str(model)}",
        'model_provider = "mdbench"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"   # the episode runs inside mdbench\'s OS sandbox',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
    ]
    if reasoning:
        lines.append(f"model_reasoning_effort = {_toml_str(reasoning)}")
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false", "",
              "[model_providers.mdbench]", 'name = "mdbench metering proxy"', f"base_url = {_toml_str(proxy_url)}",
              f"env_key = {_toml_str(PROXY_TOKEN_ENV)}", 'wire_api = "responses"',
              "request_max_retries = 2   # the proxy retries the endpoint itself", "stream_max_retries = 2"]
    if buffered:
        lines.append("stream_idle_timeout_ms = 3600000   # the proxy translates for a chat-only endpoint")
    return "\n".join(lines + [""])


def opencode_config(model: str, proxy_url: str, reasoning: str | None = None) -> str:
    """``~/.config/opencode/opencode.json``: the proxy as an OpenAI-compatible provider, every tool allowed.

    ``reasoning`` becomes the model's ``reasoningEffort`` option (sent as ``reasoning_effort``).
    """
    entry: dict[str, Any] = {"name": model, "tool_call": True}
    if reasoning:
        entry["options"] = {"reasoningEffort": reasoning}
    cfg = {"$schema": "https://opencode.ai/config.json",
           "provider": {"mdbench": {"npm": "@ai-sdk/openai-compatible", "name": "mdbench metering proxy",
                                    "options": {"baseURL": proxy_url, "apiKey": "{env:" + PROXY_TOKEN_ENV + "}"},
                                    "models": {model: entry}}},
           "model": f"mdbench/{model}", "small_model": f"mdbench/{model}",
           "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "allow",
                          "doom_loop": "allow"},
           "autoupdate": False, "share": "disabled"}
    return json.dumps(cfg, indent=1) + "\n"


# --------------------------------------------------------------------------------------------- launch

@dataclass
class HarnessLaunch:
    """What the episode runner needs to start a harness CLI (see the module docstring)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    home_files: dict[str, str]
    readonly: tuple[Path, ...]
    loopback_listen: tuple[int, ...]
    info: dict[str, Any]
    proxy: MeteringProxy
    episode_dir: Path
    _started: bool = field(default=False, repr=False)
    _stopped: dict[str, Any] | None = field(default=None, repr=False)

    def start(self, listeners: dict[int, socket.socket]) -> None:
        """Serve the proxy on the sandbox's listening sockets (``ConfinedProcess.listeners``)."""
        for port in self.loopback_listen:
            if port not in listeners:
                raise HarnessUnavailable(f"the sandbox opened no listening socket on port {port} for the model proxy")
            self.proxy.serve_socket(listeners[port])
        self._started = True

    def start_loopback(self) -> None:
        """Serve on the host's ``127.0.0.1:PORT`` (development, and sandboxes without network namespaces)."""
        for port in self.loopback_listen:
            self.proxy.serve_loopback(port)
        self._started = True

    def stop(self) -> dict[str, Any]:
        """Stop the proxy; write ``EP/trajectory.json``; return what it metered.

        Keys: ``tokens_in`` (cached included), ``tokens_cached``, ``tokens_out``, ``usd`` (``None`` when a call's
        price is unknown; ``usd_known_part`` then holds the known part), ``calls`` (answered), ``refused``,
        ``failed``, ``incomplete``, ``capped`` (the cap message or ``None``), ``error`` (the last endpoint failure,
        e.g. why an ``agent_error`` happened), ``trajectory_path`` (``None`` without an answered call), ``log``.
        """
        if self._stopped is not None:
            return self._stopped
        t = self.proxy.stop()
        traj: Path | None = None
        try:
            traj = write_trajectory(self.proxy.log_dir / "calls.jsonl", self.episode_dir / "trajectory.json",
                                    session=self.proxy.session, agent_name=self.name, agent_version=self.info["version"],
                                    model_name=self.info["model"],
                                    extra={"harness": self.info, "proxy": self.proxy.describe()})
        except (OSError, ValueError) as exc:
            log.warning("no trajectory for %s: %s", self.episode_dir, exc)
        self._stopped = {"tokens_in": t.tokens_in, "tokens_cached": t.tokens_cached, "tokens_out": t.tokens_out,
                         "usd": round(t.usd, 8) if not t.usd_unknown_calls else None,
                         "usd_known_part": round(t.usd, 8), "usd_unknown_calls": t.usd_unknown_calls,
                         "calls": t.calls, "refused": t.refused, "failed": t.failed, "incomplete": t.incomplete,
                         "capped": t.capped, "error": t.last_error, "trajectory_path": traj, "log": self.proxy.log_dir / "calls.jsonl",
                         "source": "proxy", "session": self.proxy.session}
        return self._stopped


def _cap_from_env(name: str, default: float, kind: type) -> Any:
    raw = os.environ.get(name)
    if raw is None:
        return kind(default)
    try:
        val = kind(raw)
    except ValueError:
        raise InputError(f"${name}={raw!r} is not a number") from None
    if val <= 0:
        raise InputError(f"${name} must be > 0")
    return val


def episode_caps(max_tokens: int | None, max_usd: float | None, max_calls: int | None = None) -> Caps:
    """The episode's caps: what was given (``--max-tokens``, ``--max-usd``), else ``$MDBENCH_LLM_MAX_TOKENS`` /
    ``$MDBENCH_LLM_MAX_USD``, else :data:`DEFAULT_MAX_TOKENS` / :data:`DEFAULT_MAX_USD`.

    Raises
    ------
    InputError
        A cap that is not a number > 0.
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens <= 0):
        raise InputError(f"--max-tokens {max_tokens} must be > 0")
    if max_usd is not None and (isinstance(max_usd, bool) or not max_usd > 0 or max_usd == float("inf")):
        raise InputError(f"--max-usd {max_usd} must be a finite number > 0")
    return Caps(max_tokens=max_tokens if max_tokens is not None else _cap_from_env(
                    "MDBENCH_LLM_MAX_TOKENS", DEFAULT_MAX_TOKENS, int),
                max_usd=max_usd if max_usd is not None else _cap_from_env("MDBENCH_LLM_MAX_USD", DEFAULT_MAX_USD, float),
                max_calls=max_calls)


def resolve_endpoint_api(endpoint_api: str | None) -> str:
    """``native`` or ``chat``: what was given (``--endpoint-api``), else ``$MDBENCH_LLM_ENDPOINT_API``, else native."""
    value = endpoint_api or os.environ.get("MDBENCH_LLM_ENDPOINT_API") or "native"
    if value not in ("native", "chat"):
        raise InputError(f"endpoint API {value!r} (--endpoint-api or MDBENCH_LLM_ENDPOINT_API) must be native or chat")
    return value


def _cli_recipe(name: str, binary: Path, *, model: str, prompt: str, workspace: Path, home: Path, proxy_url: str,
                reasoning: str | None, endpoint_api: str) -> tuple[list[str], dict[str, str], dict[str, str], str]:
    """``(argv, home files, environment, API the CLI speaks)`` of one non-interactive CLI run on the prompt."""
    # stdin closed: `codex exec` appends piped stdin to the prompt, `opencode run` waits on it
    wrap = ["/bin/sh", "-c", 'exec "$0" "$@" </dev/null']
    if name == "codex":
        argv = wrap + [str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                       "--json", "--color", "never", "-C", str(workspace), "-m", model, "--", prompt]
        home_files = {".codex/config.toml": codex_config(model, proxy_url, reasoning,
                                                         buffered=endpoint_api == "chat")}
        env = {"CODEX_HOME": str(Path(home) / ".codex"), "CODEX_MANAGED_BY_NPM": "1"}
        api = "responses (translated to chat by the proxy)" if endpoint_api == "chat" else "responses"
        return argv, home_files, env, api
    argv = wrap + [str(binary), "run", "--model", f"mdbench/{model}", "--format", "json", "--", prompt]
    home_files = {".config/opencode/opencode.json": opencode_config(model, proxy_url, reasoning)}
    env = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1"}
    return argv, home_files, env, "chat"


def harness_launch(*, name: str, model: str, endpoint: str, reasoning: str | None, workspace: Path, home: Path,
                   prompt: str, episode_dir: Path, api_key_env: str | None = None, max_tokens: int | None = None,
                   max_usd: float | None = None, max_calls: int | None = None, prices: PriceTable | None = None,
                   retry: RetryPolicy | None = None, port: int = PROXY_PORT,
                   endpoint_api: str | None = None) -> HarnessLaunch:
    """Prepare a Codex or OpenCode run on an episode (see the module docstring).

    Parameters
    ----------
    name : {"codex", "opencode"}
    model : str
        The model id the endpoint knows (e.g. ``gpt-5``), sent unchanged.
    endpoint : str
        The maintainer's OpenAI-compatible base URL (``…/v1``); its key is read by the proxy from
        ``api_key_env`` (default ``MDBENCH_LLM_API_KEY``, then ``OPENAI_API_KEY``) and never reaches the agent.
    reasoning : str, optional
        Reasoning effort, e.g. ``high`` (Codex ``model_reasoning_effort`` → ``reasoning.effort``; OpenCode the
        model option ``reasoningEffort`` → ``reasoning_effort``).
    workspace, home : path
        The agent's working folder and its private ``HOME`` as the agent sees them.
    prompt : str
        The task prompt, passed unchanged as the CLI's message.
    episode_dir : path
        ``EP/``: the proxy logs to ``EP/llm/``, the trajectory goes to ``EP/trajectory.json``.
    max_tokens, max_usd, max_calls : optional
        Per-episode caps (defaults :data:`DEFAULT_MAX_TOKENS`, :data:`DEFAULT_MAX_USD`, none).
    endpoint_api : {"native", "chat"}, optional
        ``chat`` when the endpoint serves Chat Completions only (DeepSeek, GLM, MiniMax): the proxy translates
        Codex's Responses calls (:mod:`mdbench.llm.translate`). Default: ``$MDBENCH_LLM_ENDPOINT_API`` or
        ``native``. OpenCode speaks chat natively either way.

    Raises
    ------
    HarnessUnavailable
        The CLI is missing or not the pinned version (message with the install command).
    InputError
        An unknown harness, an empty model or prompt, a malformed price table.
    """
    if not model or not model.strip():
        raise InputError("--model is empty; give the model id your endpoint serves (e.g. gpt-5)")
    if not prompt.strip():
        raise InputError("the episode prompt is empty")
    binary, version = find_cli(name)
    root = harness_root()
    prices = prices or PriceTable.load()
    caps = episode_caps(max_tokens, max_usd, max_calls)
    endpoint_api = resolve_endpoint_api(endpoint_api)
    token = "mdbench-proxy-" + secrets.token_hex(16)
    episode_dir = Path(episode_dir)
    proxy = MeteringProxy(endpoint, log_dir=episode_dir / "llm", api_key_env=api_key_env, client_token=token,
                          prices=prices, caps=caps, retry=retry or RetryPolicy(), allowed_models=(model,),
                          endpoint_api=endpoint_api)
    proxy_url = f"http://127.0.0.1:{port}/v1"
    env = {PROXY_TOKEN_ENV: token, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    argv, home_files, cli_env, api = _cli_recipe(name, binary, model=model, prompt=prompt, workspace=workspace,
                                                  home=home, proxy_url=proxy_url, reasoning=reasoning,
                                                  endpoint_api=endpoint_api)
    env.update(cli_env)
    price = prices.describe(model)
    info = {"harness": name, "version": version, "model": model, "reasoning": reasoning, "api": api,
            "endpoint": proxy.endpoint, "api_key_env": proxy.api_key_env, "proxy_url": proxy_url,
            "binary": str(binary), "caps": {"max_tokens": caps.max_tokens, "max_usd": caps.max_usd,
                                            "max_calls": caps.max_calls},
            "price_usd_per_mtok": price, "network": "model-only", "endpoint_api": endpoint_api}
    if price is None:
        log.warning("no price for model %r in %s: USD will be unknown and the USD cap cannot apply", model,
                    prices.source)
    return HarnessLaunch(name=name, argv=argv, env=env, home_files=home_files, readonly=(root,),
                         loopback_listen=(port,), info=info, proxy=proxy, episode_dir=episode_dir)
