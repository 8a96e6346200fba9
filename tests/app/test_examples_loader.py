"""Where the commands find the example programs: beside the package, then in the working
directory's ``examples/`` (a checkout installed with ``pip install .``, run from its root)."""

from __future__ import annotations

import pickle

import pytest

from cupool.app import examples


def test_an_example_in_the_working_directory_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(examples, "EXAMPLES_DIR", tmp_path / "site-packages" / "examples")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tiny.py").write_text("ANSWER = 42\n")
    monkeypatch.chdir(tmp_path)
    assert examples.find_example("tiny") == tmp_path / "examples" / "tiny.py"
    assert examples.load_example("tiny").ANSWER == 42


def test_a_missing_example_names_every_place_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(examples, "EXAMPLES_DIR", tmp_path / "beside")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(examples.ExampleMissingError) as caught:
        examples.load_example("absent")
    message = str(caught.value)
    assert str(tmp_path / "beside") in message and str(tmp_path / "examples") in message
    assert str(pickle.loads(pickle.dumps(caught.value))) == message
