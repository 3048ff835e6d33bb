"""Static checks of Dockerfile, compose.yaml and .dockerignore (no container engine runs here):
the structure, the dependencies and healthchecks, no baked-in secrets, and that every command
they run is a real ``venturi`` subcommand with real options."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.testing import CliRunner
from venturi.cli import app

from venturi.config import parse_duration

ROOT = Path(__file__).resolve().parent.parent
SECRETISH = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY", re.IGNORECASE)
VARIABLE = re.compile(r"\$\{[A-Z_][A-Z0-9_]*(:?-[^}]*)?\}")
VENTURI_SERVICES = ("migrate", "worker", "demo")


# --- compose.yaml ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def test_compose_has_the_services_and_a_named_volume(compose: dict[str, Any]) -> None:
    assert set(services(compose)) == {"postgres", *VENTURI_SERVICES}
    postgres = services(compose)["postgres"]
    assert postgres["image"] == "postgres:15"
    volume, mount = postgres["volumes"][0].split(":", 1)
    assert mount == "/var/lib/postgresql/data" and volume in compose["volumes"]


def test_compose_dependency_chain(compose: dict[str, Any]) -> None:
    s = services(compose)
    assert s["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("worker", "demo"):
        assert s[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}}


def test_compose_healthchecks(compose: dict[str, Any]) -> None:
    s = services(compose)
    pg = s["postgres"]["healthcheck"]
    assert pg["test"][0] == "CMD-SHELL" and "pg_isready" in pg["test"][1]
    worker = s["worker"]["healthcheck"]
    assert worker["test"][:3] == ["CMD", "python", "-c"]
    assert "urllib.request" in worker["test"][3]
    port = _http_port(s["worker"]["command"])
    assert f"http://127.0.0.1:{port}/healthz" in worker["test"][3]
    # One-shot services must not inherit the image's worker probe.
    assert s["migrate"]["healthcheck"] == {"disable": True}
    assert s["demo"]["healthcheck"] == {"disable": True}


def test_compose_one_shots_and_the_sidecar(compose: dict[str, Any]) -> None:
    s = services(compose)
    assert s["migrate"]["restart"] == "no" and s["demo"]["restart"] == "no"
    worker = s["worker"]
    assert worker["restart"] in ("unless-stopped", "always", "on-failure")
    assert worker["stop_signal"] == "SIGTERM"
    stop_grace = parse_duration(worker["stop_grace_period"])
    grace = parse_duration(_option(worker["command"], "--grace"))
    assert stop_grace > grace, "the engine would SIGKILL the worker in the middle of its drain"
    assert _option(worker["command"], "--app") == "venturi.examples"


def test_compose_environment_only_through_variables(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        env = service.get("environment", {})
        assert isinstance(env, dict), f"{name}: use a mapping so values can be checked"
        for key, value in env.items():
            if SECRETISH.search(key):
                assert VARIABLE.fullmatch(str(value)), f"{name}.{key} is hard-coded"
            if "://" in str(value):  # a DSN: its password must be a variable too
                password = urlsplit(VARIABLE.sub("VARIABLE", str(value))).password
                assert password in (None, "VARIABLE"), f"{name}.{key} embeds a literal password"
    assert not (ROOT / ".env").exists(), "a committed .env would carry secrets"


def test_compose_venturi_services_share_one_image_built_here(compose: dict[str, Any]) -> None:
    images = {services(compose)[n]["image"] for n in VENTURI_SERVICES}
    assert len(images) == 1
    assert all(services(compose)[n]["build"] == "." for n in VENTURI_SERVICES)


# --- the commands compose and the Dockerfile run are real --------------------------------


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _http_port(command: list[str]) -> str:
    return _option(command, "--http").rsplit(":", 1)[1]


def _check_command(command: list[str]) -> None:
    subcommand, options = command[0], [a for a in command[1:] if a.startswith("--")]
    result = CliRunner().invoke(app, [subcommand, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"`venturi {subcommand}` is not a command: {result.output}"
    for option in options:
        assert re.search(rf"{re.escape(option)}\b", result.output), \
            f"`venturi {subcommand}` has no {option}"


@pytest.mark.parametrize("service", [
    "migrate",
    "demo",
    "worker",
])
def test_compose_commands_are_real_venturi_commands(compose: dict[str, Any],
                                                    service: str) -> None:
    _check_command(services(compose)[service]["command"])


def test_dockerfile_default_command_is_a_real_venturi_command() -> None:
    _check_command(_json_instruction(final_stage(dockerfile()), "CMD"))


# --- Dockerfile --------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions:
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return stages(instructions)[-1]


def _json_instruction(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    (args,) = [a for k, a in stage if k == keyword]
    value: list[str] = json.loads(args)  # exec form: no shell to swallow SIGTERM
    return value


def test_dockerfile_is_multi_stage_on_slim_python() -> None:
    all_stages = stages(dockerfile())
    assert len(all_stages) >= 2
    froms = [stage[0][1] for stage in all_stages]
    assert all(re.match(r"python:\$\{PYTHON_VERSION\}-slim|python:3\.11[\w.-]*-slim", f)
               for f in froms), froms
    assert re.search(r"\bAS builder$", froms[0])
    args = dict(a.split("=", 1) for k, a in dockerfile() if k == "ARG" and "=" in a)
    assert args.get("PYTHON_VERSION") == "3.11"


def test_dockerfile_final_stage_installs_only_the_wheel() -> None:
    builder, final = stages(dockerfile())[0], final_stage(dockerfile())
    assert any(k == "RUN" and "build --wheel" in a for k, a in builder)
    copies = [a for k, a in final if k == "COPY"]
    assert copies and all(a.startswith("--from=builder ") for a in copies), copies
    runs = " ".join(a for k, a in final if k == "RUN")
    assert "/tmp/dist/*.whl" in runs and "pip install" in runs
    for dev_only in ("[dev]", "[embedded]", "build>=", "pytest", "gcc", "apt-get install"):
        assert dev_only not in runs


def test_the_image_has_the_web_extra_its_http_endpoints_need(compose: dict[str, Any]) -> None:
    """--http is served by uvicorn (the web extra): the image's default worker and the
    compose sidecar both serve it, so the wheel goes in with that extra."""
    final = final_stage(dockerfile())
    installs = [a for k, a in final if k == "RUN" and "pip install" in a]
    assert installs and all('"${1}[web]"' in a and "set -- /tmp/dist/*.whl" in a
                            for a in installs), installs
    assert "--http" in _json_instruction(final, "CMD")
    assert "--http" in services(compose)["worker"]["command"]


def test_dockerfile_runs_as_a_non_root_user_before_the_entrypoint() -> None:
    final = final_stage(dockerfile())
    keywords = [k for k, _ in final]
    users = [(i, a) for i, (k, a) in enumerate(final) if k == "USER"]
    assert users, "the final stage must switch to an unprivileged user"
    index, user = users[-1]
    assert user.split(":")[0] not in ("root", "0")
    assert index < keywords.index("ENTRYPOINT")


def test_dockerfile_entrypoint_cmd_and_healthcheck() -> None:
    final = final_stage(dockerfile())
    assert _json_instruction(final, "ENTRYPOINT") == ["venturi"]
    cmd = _json_instruction(final, "CMD")
    assert cmd[:3] == ["worker", "--app", "venturi.examples"]
    (health,) = [a for k, a in final if k == "HEALTHCHECK"]
    assert "urllib.request" in health and "curl" not in health
    assert f"http://127.0.0.1:{_http_port(cmd)}/healthz" in health
    assert ("STOPSIGNAL", "SIGTERM") in final


def test_dockerfile_bakes_in_no_secrets() -> None:
    for keyword, args in dockerfile():
        if keyword in ("ENV", "ARG"):
            assert not SECRETISH.search(args), f"{keyword} {args}"
            assert "VENTURI_DSN" not in args, "the DSN carries a password: pass it at run time"


def test_dockerignore_keeps_secrets_and_clutter_out_of_the_context() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".env", ".venv", "tests"} <= ignored
    copied = [a.split()[0] for k, a in stages(dockerfile())[0] if k == "COPY"]
    assert not any(path.rstrip("/") in ignored for path in copied), "COPY of an ignored path"


def test_kubernetes_notes_pod_spec_is_consistent() -> None:
    """The pod spec in the docs: probes on the worker's endpoints, the kill timeout longer
    than the drain grace, and the DSN from a Secret."""
    text = (ROOT / "docs" / "operations" / "containers.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    spec = yaml.safe_load(block)["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    grace = args[args.index("--grace") + 1]
    assert grace.endswith("s") and spec["terminationGracePeriodSeconds"] > int(grace[:-1])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    http = args[args.index("--http") + 1]
    assert http.endswith(":9090") and container["ports"][0]["containerPort"] == 9090
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["VENTURI_DSN"]["valueFrom"]
    _check_command(args)
