"""The engine's own GGUF reader against the gguf package's GGUFReader (the reference) on the same files."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from llmchat.engine.quant.gguf_file import GGUFFile, GGUFFormatError


def reference_fields(reader: GGUFReader) -> dict:
    out = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue   # the package's own pseudo-fields (version, counts)
        parts = [f.parts[i] for i in f.data]
        if f.types[0] == GGUFValueType.ARRAY and f.types[-1] == GGUFValueType.STRING:
            out[key] = [bytes(p).decode("utf-8") for p in parts]
        elif f.types[0] == GGUFValueType.ARRAY:
            out[key] = np.concatenate(parts) if parts else np.array([])
        elif f.types[0] == GGUFValueType.STRING:
            out[key] = bytes(parts[0]).decode("utf-8")
        else:
            out[key] = parts[0].tolist()[0]
    return out


@pytest.mark.parametrize("arch, mix", [("llama", "mixed"), ("qwen2", "q4_0"), ("qwen3", "f32")])
def test_fields_and_tensors_match_the_gguf_package(tiny_gguf, arch, mix):
    path = tiny_gguf(arch, mix)
    ours, ref = GGUFFile(path), GGUFReader(str(path))
    want = reference_fields(ref)
    assert set(ours.fields) == set(want)
    for key, value in want.items():
        got = ours.fields[key]
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got, value, err_msg=key)
        else:
            assert got == pytest.approx(value) if isinstance(value, float) else got == value, key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for mine, theirs in zip(ours.tensors, ref.tensors):
        assert mine.type_name == theirs.tensor_type.name
        assert mine.shape == tuple(int(s) for s in theirs.shape)
        assert (mine.n_bytes, mine.n_elements) == (int(theirs.n_bytes), int(theirs.n_elements))
        np.testing.assert_array_equal(ours.read(mine), np.asarray(theirs.data).view(np.uint8).reshape(-1))


def test_cut_short_is_a_format_error_at_open_or_read(tiny_gguf, tmp_path):
    data = tiny_gguf("llama", "q8_0").read_bytes()
    meta_cut = tmp_path / "meta.gguf"
    meta_cut.write_bytes(data[:200])
    with pytest.raises(GGUFFormatError):
        GGUFFile(meta_cut)
    data_cut = tmp_path / "data.gguf"
    data_cut.write_bytes(data[:-100])
    with pytest.raises(GGUFFormatError, match="ends past the end of the file"):
        GGUFFile(data_cut)


def test_a_file_cut_after_it_was_opened_fails_on_read(tiny_gguf, tmp_path):
    path = tmp_path / "shrinks.gguf"
    path.write_bytes(tiny_gguf("llama", "q8_0").read_bytes())
    reader = GGUFFile(path)
    last = max(reader.tensors, key=lambda t: t.offset)
    with open(path, "r+b") as handle:
        handle.truncate(last.offset + 10)
    with pytest.raises(GGUFFormatError, match="cut short inside tensor"):
        reader.read(last)


def test_not_gguf(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        GGUFFile(path)


def test_long_string_arrays_are_read_lazily_and_equal(tmp_path):
    from gguf import GGUFWriter
    from llmchat.engine.quant.gguf_file import LazyStrings
    words = [f"w{i}é" * (i % 7) for i in range(LazyStrings.THRESHOLD + 10)]
    path = tmp_path / "strings.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_array("test.words", words)
    w.add_uint32("test.after", 7)   # a field after the skipped array is still in place
    for step in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        step()
    reader = GGUFFile(path)
    got = reader.fields["test.words"]
    assert isinstance(got, LazyStrings) and len(got) == len(words)
    assert reader.fields["test.after"] == 7
    assert got[5] == words[5] and list(got) == words and got == words
