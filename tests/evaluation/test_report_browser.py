"""`privembed evaluate` end to end, and the report opened in headless Chromium.

The corpus is the demo's: seeded synthetic clinical notes with their sensitive values. To keep
the test fast it embeds them with a transparent bag-of-words hashing embedding instead of the
MiniLM model (the report does not depend on where the vectors come from).

Chromium is required: if it is missing the test fails (CI installs Debian's ``chromium``; set
``PRIVEMBED_CHROMIUM`` to use another binary). A screenshot is written to the test's temporary
folder, or kept in ``$PRIVEMBED_ARTIFACTS`` when that is set (never into the source tree).

The layout check opens the page in a 1,280-pixel-wide window: the page itself must not scroll
sideways, and after the wide "All configurations" table is scrolled fully to the right inside
its own box, every configuration row must still show its name (the sticky first column).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

# Injected at the top of <head> of a copy of the page: records every failed load (capturing
# error events) and, once the page has loaded, each image's natural size and every resource
# the page fetched, into <pre id="probe"> for --dump-dom.
PROBE = """<script>
window.__failed = [];
window.addEventListener('error', function (e) {
  var t = e.target || {};
  window.__failed.push(String(t.src || t.href || e.message || 'error'));
}, true);
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return {w: i.naturalWidth, h: i.naturalHeight, complete: i.complete, alt: i.alt};
  });
  var res = performance.getEntriesByType('resource').map(function (r) { return r.name; });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({images: imgs, failed: window.__failed, resources: res});
  document.body.appendChild(pre);
});
</script>"""


# Injected likewise for the layout check: page-level overflow at the window's width, then the
# configuration table scrolled fully right inside its box, and where each row's name cell is.
LAYOUT_PROBE = """<script>
window.addEventListener('load', function () {
  var de = document.documentElement;
  var out = {innerWidth: window.innerWidth, scrollWidth: de.scrollWidth,
             bodyScrollWidth: document.body.scrollWidth};
  var box = document.getElementById('configurations');
  out.box = {scrollWidth: box.scrollWidth, clientWidth: box.clientWidth};
  box.scrollLeft = box.scrollWidth;
  out.box.scrollLeft = box.scrollLeft;
  var b = box.getBoundingClientRect();
  out.box.left = b.left; out.box.right = b.right;
  out.rows = Array.prototype.map.call(box.querySelectorAll('tr[data-config]'), function (tr) {
    tr.scrollIntoView({block: 'center'});
    box.scrollLeft = box.scrollWidth;  // in case scrolling the row into view moved the box
    var c = tr.querySelector('.id'), r = c.getBoundingClientRect();
    var hit = document.elementFromPoint(r.left + Math.min(20, r.width / 2), r.top + r.height / 2);
    return {config: tr.getAttribute('data-config'), text: c.textContent.trim(),
            scrollLeft: box.scrollLeft,
            left: r.left, right: r.right, width: r.width, visible: c.contains(hit)};
  });
  out.scrollWidthAfter = de.scrollWidth;
  var pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    exe = os.environ.get("PRIVEMBED_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        pytest.fail(
            f"headless Chromium is required for the report test but {exe!r} does not exist; "
            "install it (Debian: apt-get install -y chromium) or set PRIVEMBED_CHROMIUM."
        )
    return exe


def run_chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def bow_embed(texts: list[str], d: int = 64) -> np.ndarray:
    out = np.zeros((len(texts), d))
    for i, t in enumerate(texts):
        for w in re.findall(r"\w+", t.lower()):
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "big")
            out[i] += np.random.default_rng(seed).standard_normal(d)
    return out.astype(np.float32)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from privembed.attacks import sensitive_tokens
    from privembed.cli import app
    from privembed.data.datasets import synthetic_clinical_notes
    from privembed.data.io import write_embeddings

    d = tmp_path_factory.mktemp("evaluate")
    notes = synthetic_clinical_notes(100, seed=0)
    X = bow_embed([n.text for n in notes])
    write_embeddings(
        d / "emb.parquet",
        X,
        ids=[n.id for n in notes],
        metadata={"embedding_model": "bag-of-words (test)"},
    )
    with (d / "texts.jsonl").open("w") as fh:
        for n in notes:
            fh.write(
                json.dumps({"id": n.id, "text": n.text, "sensitive": sorted(sensitive_tokens(n))})
                + "\n"
            )
    out = d / "report"
    args = [
        "evaluate", str(d / "emb.parquet"), "-o", str(out),
        "--mechanisms", "gaussian,laplace,mahalanobis,purkayastha",
        "--epsilon", "5,50", "--runs", "2", "--min-overlap", "0.5",
        "--texts", str(d / "texts.jsonl"), "--attack-epochs", "2",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    # the terminal never truncates a configuration name (rich: overflow="fold")
    assert "…" not in res.stdout.split("Recommended")[-1].split("Nearest")[-1]
    return out


@pytest.mark.slow
def test_evaluate_writes_report_and_tables(report):
    for name in ("index.html", "results.csv", "results.parquet", "results.json", "runs.csv"):
        assert (report / name).stat().st_size > 0, name
    data = json.loads((report / "results.json").read_text())
    metrics = {r["metric"] for r in data["summary"]}
    assert {"top1_originals", "mean_cosine", "reid@1", "leakage", "auc_sensitive"} <= metrics
    assert len(data["configs"]) == 8 and all(c["guarantee_text"] for c in data["configs"])
    assert len(data["runs"]) == 16
    for stem in ("utility_vs_epsilon", "frontier", "mechanism_gaussian", "mechanism_purkayastha"):
        assert (report / f"{stem}.png").stat().st_size > 1000
        assert (report / f"{stem}.svg").stat().st_size > 1000
    html = (report / "index.html").read_text(encoding="utf-8")
    assert "Recommend" in html and "Sigma = I" in html  # mahalanobis without a profile is flagged
    assert "Are the attacks strong enough?" in html and "knn_overlap@10 ≥ 0.5" in html
    assert "attack_status" in (report / "results.csv").read_text().splitlines()[0]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(report, tmp_path):
    html = (report / "index.html").read_text(encoding="utf-8")
    # nothing external: no URL anywhere, every src/href is an inline data URI
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", html, re.IGNORECASE)
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", html)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs)
    n_img = html.count("<img")
    assert n_img >= 6

    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    res = run_chromium(
        ["--virtual-time-budget=15000", "--dump-dom", probe.as_uri()], tmp_path / "p1"
    )
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.DOTALL)
    assert m, f"chromium did not render the page (rc={res.returncode}): {res.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["failed"] == [], got["failed"]
    assert got["resources"] == []  # nothing was fetched (data: URIs are not fetches)
    assert len(got["images"]) == n_img
    for img in got["images"]:
        assert img["complete"] and img["w"] > 100 and img["h"] > 100, img

    where = os.environ.get("PRIVEMBED_ARTIFACTS")
    shot = (Path(where) if where else tmp_path) / "evaluate_report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    res = run_chromium(
        ["--window-size=1280,4000", f"--screenshot={shot}", (report / "index.html").as_uri()],
        tmp_path / "p2",
    )
    assert shot.exists() and shot.stat().st_size > 50_000, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_report_fits_1280px_and_every_configuration_row_is_identifiable(report, tmp_path):
    """At 1,280 px: no page-level horizontal overflow; the wide table scrolls in its own box;
    scrolled fully right, every row still shows its configuration name, and names are unique."""
    html = (report / "index.html").read_text(encoding="utf-8")
    data = json.loads((report / "results.json").read_text())
    labels = [c["label"] for c in data["configs"]]
    probe = tmp_path / "layout.html"
    probe.write_text(html.replace("<head>", "<head>" + LAYOUT_PROBE, 1), encoding="utf-8")
    res = run_chromium(
        ["--window-size=1280,4000", "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()],
        tmp_path / "p3",
    )
    m = re.search(r'<pre id="layout">(.*?)</pre>', res.stdout, re.DOTALL)
    assert m, f"chromium did not render the page (rc={res.returncode}): {res.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["innerWidth"] == 1280, got
    # no page-level horizontal overflow, before and after scrolling the table's box
    assert got["scrollWidth"] <= got["innerWidth"], got
    assert got["scrollWidthAfter"] <= got["innerWidth"], got
    assert got["bodyScrollWidth"] <= got["innerWidth"], got
    # the table is wider than its box and scrolls inside it
    box = got["box"]
    assert box["scrollWidth"] > box["clientWidth"] and box["scrollLeft"] > 0, box
    assert box["right"] <= got["innerWidth"]
    rows = got["rows"]
    assert [r["config"] for r in rows] == ["unprotected", *labels]
    for r in rows:
        # the name cell stays at the box's left edge, fully inside the window, on top
        assert r["text"].rstrip(" ★") == r["config"], r
        assert box["left"] - 1 <= r["left"] and r["right"] <= got["innerWidth"], r
        assert r["width"] > 50 and r["visible"] and r["scrollLeft"] > 0, r
    assert len({r["text"] for r in rows}) == len(rows)
