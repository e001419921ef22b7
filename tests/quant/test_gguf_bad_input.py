"""Bad GGUF files get one clear error line and leave nothing in the library: truncated, unsupported tensor
type, unknown architecture, a tensor whose shape does not fit the config (a file without a chat template is
no error: tests/engine/test_chat_templates.py). The CLI prints
that line, exits non-zero, and shows no traceback."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

from gguf_models import write_gguf
from llmchat.engine.store import StoreError


def assert_refused(store, path, match: str) -> None:
    with pytest.raises(StoreError, match=match) as info:
        store.import_path(path)
    assert "\n" not in str(info.value)
    assert store.list() == [] and not any(store.registry.dir.glob("*.part"))


def test_truncated_file(store, tiny_gguf, tmp_path):
    data = tiny_gguf("llama", "q8_0").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert_refused(store, cut, r"cut\.gguf is damaged or cut short \([\d,]+ bytes; an interrupted download\?\)")


def test_unsupported_tensor_type_names_type_and_tensor(store, tiny_source, tmp_path):
    path = write_gguf(tiny_source("llama"), tmp_path / "iq.gguf", {"ffn_up": "Q8_0"})
    raw = bytearray(path.read_bytes())
    # retype one tensor in the header: IQ4_NL has Q4_0's block size and bytes, so the file stays readable
    reader = GGUFReader(str(path))
    target = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    offset = int(target.field.parts[-2].ctypes.data - reader.data.ctypes.data)   # the type field of its info
    raw[offset:offset + 4] = np.uint32(GGMLQuantizationType.IQ4_NL).tobytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(raw))
    assert_refused(store, bad, "blk.0.ffn_up.weight is of GGUF type IQ4_NL")


def test_unknown_architecture(store, tmp_path):
    path = tmp_path / "gemma.gguf"
    w = GGUFWriter(str(path), "gemma2")
    w.add_name("gemma-like")
    for step in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        step()
    assert_refused(store, path, "GGUF architecture 'gemma2' cannot be used")


def test_shape_that_does_not_fit_the_config(store, tiny_source, tmp_path):
    folder = tiny_source("qwen2")
    path = write_gguf(folder, tmp_path / "shape.gguf", {"ffn_up": "Q8_0"})
    text = path.read_bytes()
    # the same file with a wrong feed_forward_length: ffn tensors no longer fit
    w = GGUFReader(str(path))
    key = w.fields["qwen2.feed_forward_length"]
    raw = bytearray(text)
    offset = int(key.parts[-1].ctypes.data - w.data.ctypes.data)
    raw[offset:offset + 4] = np.uint32(384).tobytes()
    bad = tmp_path / "bad-shape.gguf"
    bad.write_bytes(bytes(raw))
    assert_refused(store, bad, "has shape .* its config expects")




def test_cli_prints_one_line_and_no_traceback(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really")
    env = {"LLMCHAT_DATA_DIR": str(tmp_path / "data"), "LLMCHAT_CONFIG_DIR": str(tmp_path / "cfg"),
           "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "models", "import", str(junk)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "is damaged or cut short" in done.stderr + done.stdout
    done = subprocess.run([sys.executable, "-m", "llmchat.tui.cli", "run", str(junk), "hi"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
