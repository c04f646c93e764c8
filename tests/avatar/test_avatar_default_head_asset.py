"""assets/default_head.glb: up to date with the builder, small, read at start-up, with fallbacks."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from avatar_app.avatar import default_head as dh
from avatar_app.avatar.authoring import default_head as builder
from avatar_app.avatar.authoring.glb_writer import write_avatar_glb
from avatar_app.avatar.glb_reader import read_avatar_glb
from avatar_app.resources import resource_path

REBUILD = "run `python training/build_default_head.py` after changing the default head or the face model"


@pytest.fixture(scope="module")
def fresh():
    return builder.build_head()


@pytest.fixture(scope="module")
def asset():
    path = resource_path(dh.DEFAULT_HEAD_ASSET)
    assert path.is_file(), f"{path} is missing: {REBUILD}"
    return read_avatar_glb(path)


def test_asset_matches_a_fresh_build(fresh, asset):
    mesh, settings = asset
    assert settings["builder_version"] == dh.BUILDER_VERSION, REBUILD
    assert [p.name for p in mesh.primitives] == [p.name for p in fresh.primitives], REBUILD
    for a, b in zip(mesh.primitives, fresh.primitives):
        for field in ("positions", "normals", "colors", "weights"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None) == (y is None), f"{a.name}.{field}: {REBUILD}"
            if x is not None:
                np.testing.assert_allclose(x, y, atol=1e-6, err_msg=f"{a.name}.{field}: {REBUILD}")
        assert np.array_equal(a.indices, b.indices) and np.array_equal(a.joints, b.joints), f"{a.name}: {REBUILD}"
        assert list(a.morph_targets) == list(b.morph_targets), f"{a.name} targets: {REBUILD}"
        for name in b.morph_targets:
            np.testing.assert_allclose(a.morph_targets[name], b.morph_targets[name], atol=2e-6,
                                       err_msg=f"{a.name}/{name}: {REBUILD}")
            np.testing.assert_allclose(a.morph_normals[name], b.morph_normals[name], atol=1e-3,
                                       err_msg=f"{a.name}/{name} normals: {REBUILD}")
        assert a.material == b.material
    assert [(j.name, j.parent) for j in mesh.skeleton.joints] == [(j.name, j.parent) for j in fresh.skeleton.joints]
    for ja, jb in zip(mesh.skeleton.joints, fresh.skeleton.joints):
        np.testing.assert_allclose(ja.rest_local, jb.rest_local, atol=1e-9)
        np.testing.assert_allclose(ja.inverse_bind, jb.inverse_bind, atol=1e-7)
    assert (mesh.head_joint, mesh.neck_joint, mesh.gaze_joints, mesh.neck_share) == \
        (fresh.head_joint, fresh.neck_joint, fresh.gaze_joints, fresh.neck_share)
    np.testing.assert_allclose(mesh.view_center, fresh.view_center)
    assert mesh.blendshape_map == fresh.blendshape_map


def test_asset_is_small():
    size = resource_path(dh.DEFAULT_HEAD_ASSET).stat().st_size
    assert size < 10e6  # repository rule; about 4 MB with sparse morph targets


def test_writing_is_deterministic(fresh, tmp_path):
    a = write_avatar_glb(fresh, tmp_path / "a.glb", {"builder_version": dh.BUILDER_VERSION})
    b = write_avatar_glb(fresh, tmp_path / "b.glb", {"builder_version": dh.BUILDER_VERSION})
    assert a.read_bytes() == b.read_bytes()


def test_start_up_reads_the_asset_without_building(monkeypatch, asset):
    def no_build(*_a, **_k):
        raise AssertionError("built although the asset is present")

    monkeypatch.setattr(builder, "build_head", no_build)
    mesh = dh.build_default_head(cached=False)
    assert np.array_equal(mesh.primitives[1].positions, asset[0].primitives[1].positions)
    assert mesh.target_names == asset[0].target_names


@pytest.mark.parametrize("case", ["stale", "damaged", "missing"])
def test_unusable_asset_falls_back_to_building(monkeypatch, tmp_path, caplog, fresh, case):
    path = tmp_path / "default_head.glb"
    if case == "stale":
        write_avatar_glb(fresh, path, {"builder_version": dh.BUILDER_VERSION - 1})
    elif case == "damaged":
        path.write_bytes(b"glTF\x02\x00\x00\x00garbage")
    monkeypatch.setattr("avatar_app.resources.resource_path", lambda _name: path)
    sentinel = object()
    monkeypatch.setattr(builder, "build_head", lambda style=None: sentinel)
    with caplog.at_level(logging.INFO, logger="avatar_app.avatar.default_head"):
        assert dh.build_default_head(cached=False) is sentinel
    expected = {"stale": "builder version", "damaged": "unusable", "missing": "not found"}[case]
    assert expected in caplog.text


def test_other_styles_are_built(monkeypatch):
    sentinel = object()
    monkeypatch.setattr(builder, "build_head", lambda style=None: sentinel)
    assert dh.build_default_head(dh.HeadStyle(skin=(0.5, 0.4, 0.3)), cached=False) is sentinel
