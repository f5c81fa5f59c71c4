"""The API tour of docs/api.md, as written, in a newcomer's shell after the demo (a free port for the server)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from scrape_contracts_tests.conftest import clean_env
from scrape_contracts_tests.api.servers import BIN, free_port
from scrape_contracts_tests.readme import blocks_run_by, project_folder


def test_readme_api_block(demo_snapshot: Path, tmp_path: Path) -> None:
    [block] = blocks_run_by(__file__, "test_readme_api_block")
    folder = project_folder(tmp_path)
    shutil.copytree(demo_snapshot, folder / ".dagster_home")
    out = tmp_path / "block.log"
    with out.open("w") as handle:
        shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block.text], cwd=folder, stdout=handle,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 env=clean_env(PATH=f"{BIN}:{os.environ['PATH']}", PORT=str(free_port())))
        try:
            code = shell.wait(timeout=240)
        finally:
            try:  # the server the block started in the background
                os.killpg(shell.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    text = out.read_text()
    assert code == 0, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    assert "sct_" not in text  # the token went into $TOKEN: no command and no server log printed it
    replies = _json_replies(text)
    assert replies[0] == {"status": "ok", "checks": {"project_store": "ok", "dagster_instance": "ok"}}
    assert [c["name"] for c in replies[1]] == ["books", "reviews"]
    assert replies[2]["items"][0]["record"]["sku"] == "BK-0001"
    assert replies[3]["runs"][0]["status"] == "SUBMITTED" and not replies[3]["replayed"]
    assert replies[4]["accepted_version"] == 2 and "data-team@example.com" in replies[4]["reviewer"]
    assert len(replies[5]["events"]) == 3
    assert replies[6]["contracts"][0]["contract"] == "books" and len(replies) == 7
    # the stream resumed right after Last-Event-ID 12-0, including the review made just before
    streamed = [line[4:] for line in text.splitlines() if line.startswith("id: ")]
    assert streamed[0] != "12-0" and int(streamed[0].split("-")[0]) > 12
    assert [json.loads(line[6:])["stage"] for line in text.splitlines() if line.startswith("data: ")][-2:] == [
        "reviewed", "accepted"]


def _json_replies(text: str) -> list:
    """curl prints each reply without a newline: decode them one after another (the SSE lines aside)."""
    body = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("id: ", "event: ", "data: ", "retry: ", "scrape-contracts API"))
                     and "  write  created" not in line)
    decoder, replies, at = json.JSONDecoder(), [], 0
    while at < len(body):
        if body[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(body, at)
        replies.append(value)
    return replies
