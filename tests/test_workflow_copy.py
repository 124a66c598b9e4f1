"""The test helper that copies numba's kernel cache into a workflow copy survives the other
xdist worker compiling into the same cache meanwhile (CI of c4f6335 failed on this race)."""
from __future__ import annotations

import shutil

from workflow_copy import copy_kernel_cache


def test_the_kernel_cache_copy_skips_temporary_files_and_files_that_vanish(tmp_path, monkeypatch):
    src = tmp_path / "cache"
    src.mkdir()
    for name in ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc", "k.f-1.py311.2.nbc", "k.f-1.py311.2.nbc.tmp.e1cd51", "m.cpython-311.pyc"):
        (src / name).write_bytes(b"x")
    gone = src / "k.f-1.py311.2.nbc"
    copy2 = shutil.copy2

    def racing_copy2(a, b, **kw):  # another process renames its entry away between listing and copying
        if a == str(gone):
            gone.unlink()
        return copy2(a, b, **kw)

    monkeypatch.setattr(shutil, "copy2", racing_copy2)
    copy_kernel_cache(src, tmp_path / "dst")
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["k.f-1.py311.1.nbc", "k.f-1.py311.nbi"]
