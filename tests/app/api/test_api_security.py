"""Secure defaults: loopback bind, Host check (DNS rebinding), API key, CORS, body limit."""

from __future__ import annotations

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api import ServerConfig
from app.api.security import host_name, is_loopback_name
from app.cli.main import build_parser

from .rawhttp import RawClient, sse_data
from .scripted_engine import ScriptedEngine

USER = [{"role": "user", "content": "hi"}]


def test_defaults_bind_loopback_without_cors_or_key() -> None:
    cfg = ServerConfig()
    assert (cfg.host, cfg.api_key, cfg.cors_origins) == ("127.0.0.1", None, ())
    args = build_parser().parse_args(["serve", "some-model"])
    assert (args.host, args.port, args.api_key, args.cors_origin) == ("127.0.0.1", 8080, None, [])


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1", "127.0.0.1:9",
                                  "127.8.9.10:80", "[::1]", "[::1]:8080", "app.localhost:3000"])
def test_loopback_host_names_are_accepted(host: str) -> None:
    assert is_loopback_name(host_name(host))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.com",
                                  "10.0.0.5:8080", "[fe80::1]:80", "0.0.0.0", "", "[::1", "192.168.1.2",
                                  "localhost:80@evil.example", "localhost:x", "[::1]evil", "127.0.0.1:80:80"])
def test_foreign_host_names_are_refused(host: str) -> None:
    assert not is_loopback_name(host_name(host))


def test_foreign_host_header_gets_403(live, scripted: ScriptedEngine) -> None:
    http = RawClient(live.server.port)
    for host in ("evil.example", "attacker.test:8080", "192.168.0.10"):
        r = http.post("/v1/chat/completions", json={"messages": USER}, headers={"Host": host})
        assert r.status_code == 403
        err = r.json()["error"]
        assert err["code"] == "forbidden_host" and "DNS rebinding" in err["message"]
    assert http.get("/v1/models", headers={"Host": f"localhost:{live.server.port}"}).status_code == 200
    assert http.get("/v1/models", headers={"Host": f"[::1]:{live.server.port}"}).status_code == 200


def test_allow_host_admits_a_configured_name(make_server) -> None:
    srv = make_server(allowed_hosts=("my-box.lan",))
    http = RawClient(srv.server.port)
    assert http.get("/v1/models", headers={"Host": "my-box.lan:1234"}).status_code == 200
    assert http.get("/v1/models", headers={"Host": "other.lan"}).status_code == 403


def test_api_key_required_when_set(make_server, scripted: ScriptedEngine) -> None:
    srv = make_server(api_key="s3cret")
    http = RawClient(srv.server.port)
    r = http.post("/v1/chat/completions", json={"messages": USER})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "missing_api_key" and "Authorization: Bearer" in r.json()["error"]["message"]
    r = http.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    assert (r.status_code, r.json()["error"]["type"]) == (401, "authentication_error")
    r = http.get("/v1/models", headers={"Authorization": "Basic s3cret"})
    assert r.status_code == 401
    assert http.get("/health").status_code == 200  # liveness needs no key
    with pytest.raises(openai.AuthenticationError):
        srv.client(api_key="nope").models.list()
    scripted.expect("<|channel|>final<|message|>authorized<|return|>")
    reply = srv.client(api_key="s3cret").chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "authorized"


def test_cors_off_refuses_browser_origins(live) -> None:
    http = RawClient(live.server.port)
    r = http.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "--cors-origin" in r.json()["error"]["message"]
    assert "Access-Control-Allow-Origin" not in r.headers
    pre = http.options("/v1/chat/completions", headers={"Origin": "https://evil.example",
                                                        "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 403
    assert "Access-Control-Allow-Origin" not in http.get("/v1/models").headers


def test_cors_allows_only_configured_origins(make_server, scripted: ScriptedEngine) -> None:
    good = "http://localhost:3000"
    srv = make_server(cors_origins=(good,), api_key="k")
    http = RawClient(srv.server.port)
    pre = http.options("/v1/chat/completions", headers={
        "Origin": good, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204  # a preflight carries no key and must still pass
    assert pre.headers["Access-Control-Allow-Origin"] == good
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert pre.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    scripted.expect("<|channel|>final<|message|>cors ok<|return|>")
    r = http.post("/v1/chat/completions", json={"messages": USER, "stream": True},
                  headers={"Origin": good, "Authorization": "Bearer k"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == good
    events = sse_data(r.text)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "cors ok"
    err = http.get("/v1/models", headers={"Origin": good})  # errors carry CORS headers too, so pages can read them
    assert err.status_code == 401 and err.headers["Access-Control-Allow-Origin"] == good
    bad = http.get("/v1/models", headers={"Origin": "http://localhost:4000", "Authorization": "Bearer k"})
    assert bad.status_code == 403 and "Access-Control-Allow-Origin" not in bad.headers


def test_no_engine_answers_503_then_serves_when_loaded(make_server, engine: ScriptedEngine,
                                                       scripted: ScriptedEngine) -> None:
    srv = make_server()
    srv.server.engine = None  # the desktop app starts the API before the model finishes loading
    http = RawClient(srv.server.port)
    r = http.post("/v1/chat/completions", json={"messages": USER})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_loaded"
    assert http.get("/health").json()["status"] == "loading"
    assert http.get("/v1/models").json()["data"] == []
    srv.server.engine = engine
    scripted.expect("<|channel|>final<|message|>loaded<|return|>")
    assert srv.client().chat.completions.create(model="m", messages=USER).choices[0].message.content == "loaded"  # type: ignore[arg-type]
    assert http.get("/health").json()["status"] == "ok"


def test_restart_on_the_same_loop(make_server, scripted: ScriptedEngine) -> None:
    """The GUI's API switch stops and starts the same server object."""
    srv = make_server()
    srv.call(srv.server.stop())
    assert not srv.server.running
    srv.call(srv.server.start())
    scripted.expect("<|channel|>final<|message|>again<|return|>")
    assert srv.client().chat.completions.create(model="m", messages=USER).choices[0].message.content == "again"  # type: ignore[arg-type]


def test_port_in_use_is_a_clear_error(make_server, engine: ScriptedEngine) -> None:
    from .conftest import LiveServer

    first = make_server()
    with pytest.raises(OSError, match="--port"):
        LiveServer(engine, ServerConfig(port=first.server.port or 0))


hostnames = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,30}(:[0-9]{1,5})?", fullmatch=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=hostnames.filter(lambda h: not is_loopback_name(host_name(h))))
def test_hypothesis_foreign_host_is_403(live, host: str) -> None:
    r = RawClient(live.server.port).get("/v1/models", headers={"Host": host})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host"


@pytest.fixture(scope="module")
def keyed(engine: ScriptedEngine):
    from .conftest import LiveServer

    srv = LiveServer(engine, ServerConfig(port=0, api_key="right-key"))
    yield srv
    srv.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(auth=st.none() | st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30)
       .filter(lambda a: a.strip() not in ("Bearer right-key",)))
def test_hypothesis_missing_or_wrong_key_is_401(keyed, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    r = RawClient(keyed.server.port).post("/v1/chat/completions", json={"messages": USER}, headers=headers)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
