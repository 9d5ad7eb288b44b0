"""Topology model, files, presets, summaries and drawing."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from forestcc import topology
from forestcc.topology import Link, Node, Topology, TopologyError
from forestcc.topology.cli import topo_main

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ROOT / "schedules" / "topologies"


def _minimal(**overrides) -> dict:
    data = {
        "format": "forestcc-topology", "version": 1, "name": "t",
        "nodes": [{"id": "a", "kind": "compute", "rank": 0},
                  {"id": "b", "kind": "compute", "rank": 1},
                  {"id": "sw", "kind": "switch"}],
        "links": [{"src": "a", "dst": "sw", "bandwidth": 12.5, "latency": 1, "bidirectional": True},
                  {"src": "b", "dst": "sw", "bandwidth": "100/3", "bidirectional": True}],
    }
    data.update(overrides)
    return data


def _write(tmp_path, data, name="t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize("name", sorted(topology.PRESETS))
def test_preset_files_match_generators(name):
    from_file = topology.load(TOPOLOGIES / f"{name}.json")
    generated = topology.preset(name)
    assert from_file.fingerprint() == generated.fingerprint()
    assert from_file.name == name
    assert from_file.num_ranks == generated.num_ranks


@pytest.mark.parametrize("name", sorted(topology.PRESETS))
def test_preset_files_follow_schema(name):
    import jsonschema  # the test extra installs it: a missing one must fail, not skip
    schema = json.loads((TOPOLOGIES / "topology.schema.json").read_text())
    jsonschema.validate(json.loads((TOPOLOGIES / f"{name}.json").read_text()), schema)


def test_preset_shapes():
    a100 = topology.preset("dgx-a100x2")
    assert a100.num_ranks == 16 and len(a100.switches) == 4
    assert a100.capacities()[("b0.gpu0", "b0.nvswitch")] == 300
    assert a100.capacities()[("b1.gpu3", "ib.odd")] == 25
    h100 = topology.preset("dgx-h100x4")
    assert h100.capacities()[("b3.gpu5", "rail5")] == 50
    assert h100.capacities()[("b3.gpu5", "b3.nvswitch")] == 450
    mi = topology.preset("mi250x2")
    assert mi.capacities()[("b1.gcd0", "b1.gcd1")] == 200  # four 50 GB/s xGMI links
    assert mi.capacities()[("b1.gcd0", "net")] == 16
    assert all(mi.bandwidth_out(f"b0.gcd{i}") == 7 * 50 + 16 for i in range(16))
    fat = topology.preset("a100-fattree-1024")
    assert fat.num_ranks == 1024 and len(fat.boxes()) == 128 and len(fat.rails()) == 8
    assert fat.capacities()[("su7.leaf3", "spine3")] == 400
    torus = topology.preset("torus-4x4")
    assert torus.num_ranks == 16 and not torus.switches
    for t in (a100, h100, mi, fat, torus):
        assert t.is_symmetric()


def test_round_trip_is_exact(tmp_path):
    topo = topology.from_dict(_minimal())
    assert topo.capacities()[("a", "sw")] == Fraction(25, 2)
    assert topo.capacities()[("sw", "b")] == Fraction(100, 3)
    path = tmp_path / "out.json"
    topology.save(topo, path)
    again = topology.load(path)
    assert again.fingerprint() == topo.fingerprint()
    assert again.links == topo.links
    saved = json.loads(path.read_text())
    assert len(saved["links"]) == 2 and all(l["bidirectional"] for l in saved["links"])


def test_fingerprint_ignores_presentation_not_content():
    base = topology.from_dict(_minimal())
    expanded = _minimal(name="other", description="x", links=[
        {"src": "sw", "dst": "a", "bandwidth": "25/2", "latency": 1},
        {"src": "a", "dst": "sw", "bandwidth": 12.5, "latency": 1.0},
        {"src": "b", "dst": "sw", "bandwidth": "100/3", "bidirectional": True}])
    assert topology.from_dict(expanded).fingerprint() == base.fingerprint()
    changed = _minimal()
    changed["links"][0]["bandwidth"] = 12.6
    assert topology.from_dict(changed).fingerprint() != base.fingerprint()


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["nodes"][0].update(kind="gpu"), "nodes[0].kind"),
    (lambda d: d["nodes"][1].update(id="a"), "nodes[1].id: duplicate"),
    (lambda d: d["nodes"][1].update(rank=5), "ranks must be 0..1"),
    (lambda d: d["nodes"][2].update(rank=2), "nodes[2].rank"),
    (lambda d: d["nodes"][0].pop("rank"), "nodes[0].rank"),
    (lambda d: d["nodes"][0].update(colour="red"), "nodes[0]: unknown field"),
    (lambda d: d["links"][1].update(bandwidth=-1), "links[1].bandwidth"),
    (lambda d: d["links"][1].update(bandwidth="fast"), "links[1].bandwidth"),
    (lambda d: d["links"][0].update(latency=-2), "links[0].latency"),
    (lambda d: d["links"][1].update(dst="nowhere"), "links[1].dst: unknown node 'nowhere'"),
    (lambda d: d["links"][0].pop("src"), "links[0].src"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(format="x"), "format"),
])
def test_errors_name_file_and_field(tmp_path, mutate, expected):
    data = _minimal()
    mutate(data)
    path = _write(tmp_path, data, "bad.json")
    with pytest.raises(TopologyError) as err:
        topology.load(path)
    assert str(err.value).startswith(path)
    assert expected in str(err.value)


def test_bad_json_and_missing_file(tmp_path):
    path = _write(tmp_path, "{not json", "broken.json")
    with pytest.raises(TopologyError, match="broken.json: not valid JSON"):
        topology.load(path)
    with pytest.raises(TopologyError, match="missing.json: cannot read"):
        topology.load(tmp_path / "missing.json")


def test_model_rejects_self_links():
    nodes = [Node("a", "compute", 0), Node("b", "compute", 1)]
    with pytest.raises(TopologyError, match="itself"):
        Topology("t", nodes, [Link("a", "a", Fraction(1))])


def test_reversed_turns_links_around():
    topo = topology.from_dict(_minimal(links=[{"src": "a", "dst": "b", "bandwidth": 3},
                                              {"src": "b", "dst": "a", "bandwidth": 5}]))
    assert not topo.is_symmetric()
    assert topo.reversed().capacities() == {("b", "a"): 3, ("a", "b"): 5}


def test_summary_mentions_counts_and_bandwidths():
    text = topology.summary(topology.preset("dgx-a100x2"))
    assert "16 compute, 4 switch" in text
    assert "sha256:" in text
    assert "325" in text  # 300 GB/s NVLink + 25 GB/s NIC into each GPU
    assert "boxes        2" in text and "rails        8" in text


def test_cli_list_show_and_write(tmp_path, capsys):
    assert topo_main(["list"]) == 0
    assert "dgx-a100x2" in capsys.readouterr().out
    assert topo_main(["show", str(TOPOLOGIES / "mi250x2.json")]) == 0
    assert "32 compute, 1 switch" in capsys.readouterr().out
    assert topo_main(["show", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: cannot read" in capsys.readouterr().err
    assert topo_main(["write-presets", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "torus-4x4.json").exists()


def test_draw_writes_png(tmp_path):
    import matplotlib  # noqa: F401 - the test extra installs it
    out = tmp_path / "x.png"
    assert topo_main(["draw", "dgx-a100x2", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    torus = tmp_path / "torus.png"
    from forestcc.topology.draw import draw
    draw(topology.preset("torus-4x4"), str(torus))
    assert torus.stat().st_size > 0


def test_draw_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    from forestcc.topology.draw import draw
    with pytest.raises(TopologyError, match="pip install matplotlib"):
        draw(topology.preset("dgx-a100x1"), str(tmp_path / "x.png"))
