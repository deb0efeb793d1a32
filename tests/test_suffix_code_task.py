"""bench.suffix_code_task on two hand-made wheels (no download): the earlier release's .py files are the
corpus, the later release's new or changed ones the evaluation text, in path order."""

from __future__ import annotations

import json
import zipfile

from lookupkit.bench import suffix_code_task


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)


def test_corpus_is_the_earlier_release_and_eval_its_changes(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels / "pkg-1.0-py3-none-any.whl", {"pkg/b.py": "b = 1\n", "pkg/a.py": "a = 1", "pkg/data.txt": "x",
                                                 "pkg-1.0.dist-info/x.py": "no"})
    _wheel(wheels / "pkg-2.0-py3-none-any.whl", {"pkg/a.py": "a = 1", "pkg/b.py": "b = 2\n", "pkg/c.py": "c = 3\n"})
    suffix_code_task.main(["--package", "pkg", "--earlier", "1.0", "--later", "2.0", "--cache", str(tmp_path)])
    res = json.loads(capsys.readouterr().out)
    out = tmp_path / "pkg-1.0-2.0"
    assert (out / "corpus.txt").read_text() == "# file: pkg/a.py\na = 1\n# file: pkg/b.py\nb = 1\n"
    assert (out / "eval.txt").read_text() == "# file: pkg/b.py\nb = 2\n# file: pkg/c.py\nc = 3\n"
    assert (res["corpus_files"], res["eval_files"], res["eval_added"], res["later_files"]) == (2, 2, 1, 3)
