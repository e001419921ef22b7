"""A stand-in Hugging Face Hub: a real HTTP server on 127.0.0.1 speaking what huggingface_hub uses.

Endpoints: GET /api/models (search: names only, as the Hub lists siblings),
GET /api/models/{repo}[/revision/{rev}] (info, ?blobs=true sizes; GGUF repos also carry "gguf" metadata),
HEAD/GET /{repo}/resolve/{rev}/{file} with ETag (git sha1 or LFS sha256),
X-Repo-Commit, X-Linked-Etag/-Size, Content-Length and Range. Faults for tests: gated repos, a dropped
connection midway, a corrupted body, slow bodies.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

GOOD_TOKEN = "hf_good_token_for_tests"


def _is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".bin", ".gguf"))


def _etag(name: str, data: bytes) -> str:
    if _is_lfs(name):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _param_counts(files: dict[str, bytes]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, data in files.items():
        if not name.endswith(".safetensors"):
            continue
        (n,) = struct.unpack("<Q", data[:8])
        for key, t in json.loads(data[8:8 + n]).items():
            if key != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= d
                counts[t["dtype"]] = counts.get(t["dtype"], 0) + count
    return counts


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    sha: str = ""
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    pipeline_tag: str = "text-generation"
    tags: list[str] = field(default_factory=list)
    gguf: dict | None = None        # the Hub's GGUF metadata of GGUF repos: {"architecture": "llama", "total": n}

    def __post_init__(self):
        self.sha = self.sha or hashlib.sha1(self.repo_id.encode() + str(sorted(self.files)).encode()).hexdigest()

    @classmethod
    def from_folder(cls, repo_id: str, folder: Path, **kw) -> "FakeRepo":
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*"))
                 if p.is_file()}
        return cls(repo_id, files, **kw)

    def info(self, blobs: bool) -> dict:
        config = json.loads(self.files["config.json"]) if "config.json" in self.files else None
        siblings = []
        for name, data in sorted(self.files.items()):
            sib = {"rfilename": name}
            if blobs:
                sib["size"] = len(data)
                sib["blobId"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                if _is_lfs(name):
                    sib["lfs"] = {"size": len(data), "sha256": _etag(name, data), "pointerSize": 134}
            siblings.append(sib)
        counts = _param_counts(self.files)
        out = {"id": self.repo_id, "modelId": self.repo_id, "sha": self.sha, "private": False,
               "gated": "manual" if self.gated else False, "downloads": self.downloads, "likes": self.likes,
               "lastModified": self.last_modified, "pipeline_tag": self.pipeline_tag, "tags": list(self.tags),
               "library_name": "transformers", "siblings": siblings}
        if config is not None:
            out["config"] = {k: config[k] for k in ("architectures", "model_type", "quantization_config")
                             if k in config}
        if counts:
            out["safetensors"] = {"parameters": counts, "total": sum(counts.values())}
        if self.gguf is not None:
            out["gguf"] = dict(self.gguf)
        return out


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    drop_after: dict[str, int] = field(default_factory=dict)   # file -> bytes sent before dropping (once)
    corrupt: set[str] = field(default_factory=set)              # files served with flipped bytes
    slow: float = 0.0                                           # seconds between 64 KiB pieces
    # file -> gate: its body stops after the first 64 KiB piece until the gate opens, and `held` is set then, so
    # a test can act (cancel) while a download is surely midway, however loaded the machine is
    hold: dict[str, threading.Event] = field(default_factory=dict)
    held: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def ranged(self, filename: str) -> list[str]:
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + filename) and r]


def _make_handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, obj, status: int = 200, headers: dict | None = None):
            self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

        def _error(self, status: int, code: str, message: str, head: bool = False):
            self._send(status, json.dumps({"error": message}).encode(),
                       {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
                       head=head)

        def do_HEAD(self):
            self._route(head=True)

        def do_GET(self):
            self._route(head=False)

        def _route(self, head: bool):
            url = urlparse(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            if path == "/api/models":
                return self._search(query)
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
            if m:
                return self._info(m.group(1), m.group(2) or "main", query)
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            if m:
                return self._resolve(m.group(1), m.group(2), m.group(3), head)
            self._error(404, "EntryNotFound", "no such endpoint", head)

        def _repo(self, repo_id: str, rev: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            if rev not in ("main", repo.sha):
                self._error(404, "RevisionNotFound", "Invalid rev id")
                return None
            return repo

        def _search(self, query):
            text = query.get("search", [""])[0].lower()
            tag = query.get("pipeline_tag", [None])[0]
            found = [r for r in hub.repos.values() if text in r.repo_id.lower() and (tag is None or r.pipeline_tag == tag)]
            sort = query.get("sort", ["downloads"])[0]
            key = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
                   "lastModified": lambda r: r.last_modified}.get(sort, lambda r: r.downloads)
            found.sort(key=key, reverse=True)
            limit = int(query.get("limit", ["1000"])[0])
            self._json([r.info(blobs=False) for r in found[:limit]])

        def _info(self, repo_id: str, rev: str, query):
            repo = self._repo(repo_id, rev)
            if repo:
                self._json(repo.info(blobs=query.get("blobs", ["false"])[0].lower() == "true"))

        def _resolve(self, repo_id: str, rev: str, filename: str, head: bool):
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found", head)
            if rev not in ("main", repo.sha):
                return self._error(404, "RevisionNotFound", "Invalid rev id", head)
            auth = self.headers.get("Authorization")
            if repo.gated and auth != f"Bearer {GOOD_TOKEN}":
                status = 401 if auth is None else 403
                return self._error(status, "GatedRepo", "Access to this model is restricted", head)
            data = repo.files.get(filename)
            if data is None:
                return self._error(404, "EntryNotFound", "Entry not found", head)
            etag = _etag(filename, data)
            headers = {"ETag": f'"{etag}"', "X-Repo-Commit": repo.sha, "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            if _is_lfs(filename):
                headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))})
            if filename in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start, status = 0, 200
            rng = self.headers.get("Range")
            if rng and not head:
                start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                status = 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if head:
                return
            drop = hub.drop_after.pop(filename, None)
            if drop is not None:
                self.wfile.write(body[:drop])
                self.wfile.flush()
                self.close_connection = True  # the client sees the body end early
                return
            try:
                for i in range(0, len(body), 1 << 16):
                    self.wfile.write(body[i:i + (1 << 16)])
                    gate = hub.hold.get(filename)
                    if gate is not None and i == 0 and len(body) > 1 << 16:
                        self.wfile.flush()
                        hub.held.set()
                        gate.wait(timeout=120)
                    if hub.slow:
                        time.sleep(hub.slow)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client went away (cancel): nothing to report

    return Handler


class FakeHubServer:
    """Runs a FakeHub on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, hub: FakeHub | None = None):
        self.hub = hub or FakeHub()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self.hub))
        self.httpd.daemon_threads = True
        self.hub.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self.hub

    def __exit__(self, *exc):
        for gate in self.hub.hold.values():
            gate.set()   # a test that stopped early leaves no body waiting
        self.httpd.shutdown()
        self.httpd.server_close()
