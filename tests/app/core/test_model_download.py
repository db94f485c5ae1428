"""Downloads (app/core/model_download.py, model_hub.py, model_progress.py) from a local server that
speaks the hub's protocol (tests/hub_server.py): resume after a cut connection, a killed server or a
cancel; hashes checked; the disk-space refusal. Nothing here reaches the internet: every call gets the
local endpoint."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from hub_server import HubRepo, HubServer

from app.core import model_download as md
from app.core import model_hub as hub_api
from app.core import model_progress as mp
from engine.checkpoint import Checkpoint

REPO = "openai/gpt-oss-tiny"
SHARD = "model-00001-of-00003.safetensors"  # 190,952 bytes in the sharded tiny checkpoint


@pytest.fixture
def hub_model(synth_dir) -> Path:
    return synth_dir("tiny", 0, max_shard_bytes=200_000)


@pytest.fixture
def hub(hub_model: Path, monkeypatch: pytest.MonkeyPatch):
    import huggingface_hub.constants as hf_constants

    # tests/conftest.py switches the hub client offline for everyone; these tests talk to a local hub
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(md, "HTTP_CHUNK", 16 << 10)  # the tiny files span several chunks
    server = HubServer([HubRepo.from_folder(REPO, hub_model, {"original/model.safetensors": b"x" * 1000,
                                                               "README.md": b"# tiny\n"})]).start()
    yield server
    server.stop()


def fetch(server: HubServer, dest: Path, **kw) -> Path:
    return md.download(hub_api.list_repo(REPO, endpoint=server.url), dest, endpoint=server.url, **kw)


def assert_same_model(dest: Path, source: Path) -> None:
    for f in source.iterdir():
        assert (dest / f.name).read_bytes() == f.read_bytes(), f.name
    ck = Checkpoint.open(dest)  # opens and validates every tensor's dtype and shape
    ck.close()
    assert md.read_manifest(dest)["complete"] is True
    assert not (dest / md.PART_DIR).exists()


def test_listing_keeps_the_engine_files_with_their_hashes(hub: HubServer, hub_model: Path) -> None:
    listing = hub_api.list_repo(REPO, endpoint=hub.url)
    names = {f.path for f in listing.files}
    assert names == {p.name for p in hub_model.iterdir()}  # not original/, not README.md
    shard = next(f for f in listing.files if f.path == SHARD)
    assert shard.size == (hub_model / SHARD).stat().st_size and shard.sha256 and len(shard.sha256) == 64
    config = next(f for f in listing.files if f.path == "config.json")
    assert config.sha256 is None and config.blob_id
    assert listing.revision == hub.repos[REPO].commit


def test_download_verifies_and_the_checkpoint_loads(hub: HubServer, hub_model: Path, tmp_path: Path) -> None:
    seen: list[mp.DownloadProgress] = []
    dest = fetch(hub, tmp_path / "m", progress=seen.append)
    assert_same_model(dest, hub_model)
    downloads = [p for p in seen if p.phase == "download"]
    assert downloads[-1].done == downloads[-1].total == sum(f.stat().st_size for f in hub_model.iterdir())
    assert "of" in mp.progress_text(downloads[-1])
    assert all(r is None for r in hub.ranges(SHARD))  # nothing to resume


def test_the_hub_token_goes_to_the_hub_not_to_the_cdn(hub: HubServer, hub_model: Path, tmp_path: Path) -> None:
    hub.cdn_host = "localhost"  # another host name for the same server
    listing = hub_api.list_repo(REPO, endpoint=hub.url, token="hf_secret")
    md.download(listing, tmp_path / "m", endpoint=hub.url, token="hf_secret")
    assert_same_model(tmp_path / "m", hub_model)
    cdn = [a for p, a in hub.auth if p.startswith("/cdn/")]
    resolve = [a for p, a in hub.auth if "/resolve/" in p]
    assert cdn and all(a is None for a in cdn)
    assert resolve and all(a == "Bearer hf_secret" for a in resolve)


def test_a_cut_connection_resumes_with_a_range_request(hub: HubServer, hub_model: Path, tmp_path: Path) -> None:
    hub.faults.cut_once[SHARD] = 100_000
    dest = fetch(hub, tmp_path / "m")
    ranges = hub.ranges(SHARD)
    assert ranges[0] is None and ranges[1] is not None and int(ranges[1][6:].rstrip("-")) > 0, ranges
    assert_same_model(dest, hub_model)


def test_a_killed_server_restarted_mid_file_is_resumed(hub: HubServer, hub_model: Path, tmp_path: Path) -> None:
    hub.faults.kill_at[SHARD] = 120_000
    port = hub.port
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fetch(hub, tmp_path / "m")))
    t.start()
    assert hub.killed.wait(30)
    hub.start(port=port)  # back before the client's retries run out
    t.join(60)
    assert out == [tmp_path / "m"]
    resumed = [r for r in hub.ranges(SHARD) if r]
    assert resumed and int(resumed[0][6:].rstrip("-")) > 0
    assert_same_model(tmp_path / "m", hub_model)


@pytest.mark.slow  # the client retries a dead server for ~5 s before giving up
def test_a_dead_server_leaves_a_partial_file_the_next_run_resumes(hub: HubServer, hub_model: Path,
                                                                   tmp_path: Path) -> None:
    hub.faults.kill_at[SHARD] = 120_000
    listing = hub_api.list_repo(REPO, endpoint=hub.url)
    port = hub.port
    with pytest.raises(hub_api.DownloadError, match="downloading again resumes from there"):
        md.download(listing, tmp_path / "m", endpoint=hub.url)
    part = md.part_path(tmp_path / "m", next(f for f in listing.files if f.path == SHARD))
    kept = part.stat().st_size
    assert 0 < kept <= 120_000
    hub.start(port=port)
    md.download(listing, tmp_path / "m", endpoint=hub.url)
    assert hub.ranges(SHARD)[-1] == f"bytes={kept}-"
    assert_same_model(tmp_path / "m", hub_model)


def test_cancel_stops_mid_file_and_the_next_run_resumes(hub: HubServer, hub_model: Path, tmp_path: Path) -> None:
    hub.faults.rate = 400_000  # bytes/s: the cancel lands inside the shard
    cancel = threading.Event()

    def progress(p: mp.DownloadProgress) -> None:
        if p.file == SHARD and p.phase == "download":
            cancel.set()

    with pytest.raises(hub_api.DownloadCancelled):
        fetch(hub, tmp_path / "m", cancel=cancel, progress=progress)
    assert not (tmp_path / "m" / SHARD).exists()
    listing = hub_api.list_repo(REPO, endpoint=hub.url)
    kept = md.part_path(tmp_path / "m", next(f for f in listing.files if f.path == SHARD)).stat().st_size
    assert 0 < kept < (hub_model / SHARD).stat().st_size
    hub.faults.rate = 0
    fetch(hub, tmp_path / "m")
    assert hub.ranges(SHARD)[-1] == f"bytes={kept}-"
    assert_same_model(tmp_path / "m", hub_model)


def test_a_corrupted_delivery_is_detected_and_fetched_again(hub: HubServer, hub_model: Path,
                                                            tmp_path: Path) -> None:
    hub.faults.corrupt[SHARD] = 1
    dest = fetch(hub, tmp_path / "m")
    assert hub.ranges(SHARD) == [None, None]  # the damaged copy, then a whole new one
    assert_same_model(dest, hub_model)


def test_a_file_damaged_on_disk_is_detected_and_fetched_again(hub: HubServer, hub_model: Path,
                                                              tmp_path: Path) -> None:
    dest = fetch(hub, tmp_path / "m")
    data = bytearray((dest / SHARD).read_bytes())
    data[1000] ^= 0x01  # same size: only the hash can tell
    (dest / SHARD).write_bytes(bytes(data))
    fetch(hub, dest)
    assert len(hub.ranges(SHARD)) == 2
    assert_same_model(dest, hub_model)
    fetch(hub, dest)  # all vouched for by the manifest: nothing fetched again
    assert len(hub.ranges(SHARD)) == 2


def test_a_file_that_never_verifies_is_refused(hub: HubServer, tmp_path: Path) -> None:
    hub.faults.corrupt[SHARD] = 2
    expected = re.escape(f"{SHARD} from {REPO} failed its check twice: sha256")
    with pytest.raises(hub_api.VerificationError, match=expected):
        fetch(hub, tmp_path / "m")
    assert not (tmp_path / "m" / SHARD).exists()


def test_not_enough_disk_space_is_refused_before_writing(hub: HubServer, tmp_path: Path) -> None:
    listing = hub_api.list_repo(REPO, endpoint=hub.url)
    with pytest.raises(hub_api.NotEnoughDiskSpace) as err:
        md.download(listing, tmp_path / "m", endpoint=hub.url, extra_bytes=3 << 30, free=lambda _p: 2 << 30)
    msg = str(err.value)
    assert msg.startswith(f"Not enough disk space for {REPO} in {tmp_path / 'm'}")
    assert "3.00 GiB for the expert store" in msg and "2.00 GiB is free" in msg
    assert not any(p.suffix == ".safetensors" for p in (tmp_path / "m").rglob("*"))
    assert hub.ranges(SHARD) == []
    assert md.free_bytes(tmp_path / "not" / "yet") > 0  # the real probe: nearest existing parent


def test_bad_repo_ids_and_unknown_repos_are_named(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(hub_api.DownloadError, match="not a Hugging Face repo id"):
        hub_api.list_repo("gpt oss", endpoint=hub.url)
    with pytest.raises(hub_api.DownloadError, match=re.escape("No model 'openai/nope' on http://127.0.0.1")):
        hub_api.list_repo("openai/nope", endpoint=hub.url)
    (tmp_path / "readme").mkdir()
    (tmp_path / "readme" / "README.md").write_text("hi")
    hub.repos["someone/notes"] = HubRepo.from_folder("someone/notes", tmp_path / "readme")
    with pytest.raises(hub_api.DownloadError, match="not a gpt-oss checkpoint"):
        hub_api.list_repo("someone/notes", endpoint=hub.url)


def test_offline_mode_is_explained(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(hub_api.DownloadError, match="HF_HUB_OFFLINE is set"):
        hub_api.list_repo(REPO, endpoint=hub.url)


def test_progress_text_gives_rate_and_time_left() -> None:
    p = mp.DownloadProgress("download", "model.safetensors", 3 << 30, 13 << 30, 50 * hub_api.MIB, 204.8)
    assert mp.progress_text(p) == ("Downloading model.safetensors: 3.00 GiB of 13.00 GiB (23 %) · 50.0 MiB/s · "
                                   "about 3 min left")
