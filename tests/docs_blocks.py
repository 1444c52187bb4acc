"""Documentation that runs as written (issues 28.8 and 40.4): the machinery of
``tests/test_docs.py`` (the classification, the substitutions, what a block may need) and of
``tests/test_docs_run_<group>.py`` (the blocks that run, a group of documents per file).

Every fenced block of ``README.md`` and ``docs/*.md`` is classified here, and a block the test
cannot classify fails it:

* ``bash`` / ``sh`` / ``shell`` blocks and ``python`` blocks **run**, each in a fresh, empty
  temporary folder, with the ``privembed`` of this environment first on the ``PATH``; each must
  exit 0. A Python block that wrote a file then runs a second time in the same folder, so a
  block that works only once (a key file it creates, an output it refuses to replace) fails. A ``console`` block runs
  its ``$ `` lines (with their ``\\`` continuations); its other lines are output.
* A block that needs something it does not make says so **in the block**, one comment line per
  thing, ``# needs: <what> (<where it comes from>)``. Each ``<what>`` must start with a key of
  :data:`PROVIDERS` (the test then provides it in the block's folder or environment: files built
  once per module from the bundled sample -- gensim's Lee corpus and the offline MiniLM --, a
  local PostgreSQL with pgvector, a running ``privembed serve``) or of :data:`UNAVAILABLE` (what
  no test machine has: network, a GPU, a secret API key; the block is reported as a skipped test
  with that reason, never left out silently).
* A block too long for a test run (an hours-long experiment or benchmark) runs at a small size
  through :data:`SUBSTITUTIONS`: each replacement is visible here and must match its document's
  blocks exactly once, so an edit of the document cannot slip a block out of the test.
* ``text`` blocks (diagrams, sample output) are not run; ``toml`` and ``json`` blocks must parse.

Data comes from what ships offline: the documents write it themselves, or name it as a need.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
NEEDS = re.compile(r"^\s*#\s*needs:\s*(?P<what>.+?)\s*$", re.MULTILINE)
SHELLS = {"bash", "sh", "shell", "console"}
#: blocks that are not run: the parser each must pass (``None``: free text)
DATA: dict[str, Callable[[str], object] | None] = {
    "toml": tomllib.loads,
    "json": json.loads,
    "text": None,
}
#: seconds one block may take (the attack synopsis: about 5 min on two busy cores)
BLOCK_TIMEOUT = 600
#: the most blocks that may be skipped for a need no test machine has (keep them few and honest;
#: the 20th: bench_law.py over the 515,005-passage corpus, which takes an hour to embed)
MAX_UNAVAILABLE = 20


# ---- what a block may need --------------------------------------------------------------------

#: needs no test machine meets: the block is reported as skipped, with this reason
UNAVAILABLE: dict[str, str] = {
    "network access": "the test machine has no network (pip, apt-get download, a remote host)",
    "a GPU": "GPU-only run (the device machine of the project's device tool)",
    "an OpenAI API key": "a secret of the user's and the network",
    "a fresh clone": (
        "make test is what runs this suite (.ci/run); make demo in a fresh clone, then the "
        "README's Command line blocks, run in .ci/wheel-smoke"
    ),
    "hours of CPU": "an hours-long experiment; no cut-down version of its scripts runs here",
    "langchain-openai": "not installed by any extra of privembed (pip install langchain-openai)",
    "a Ray cluster": "a remote Ray cluster (the same job runs on a local Ray in the block above)",
}


@dataclass(frozen=True)
class Substitution:
    """``old`` becomes ``new`` in ``document``'s blocks before they run; ``why`` is shown."""

    document: str
    old: str
    new: str
    why: str


#: a server that a document starts and leaves running: here it starts on a free port, answers
#: ``/healthz``, and is stopped
_SERVE_AND_STOP = (
    'privembed serve --config serve.toml --port "$DOCS_PORT" & pid=$!; ok=0; '
    'for i in $(seq 360); do python -c "import urllib.request as u; '
    "u.urlopen('http://127.0.0.1:$DOCS_PORT/healthz')\" 2>/dev/null && { ok=1; break; }; "
    "sleep 0.5; done; kill $pid; wait $pid || true; [ $ok = 1 ]  #"
)
_SMALL_AUDIT = "--samples 2000"  # an audit's draws per side (1e6 in the documents)
_SMALL_EVAL = "--n-queries 100 --attack-epochs 2"  # ranking queries; the token attacker's epochs
_BENCH_AUDIT = "python benchmarks/bench_audit.py"


def _bench_audit(document: str) -> list[Substitution]:
    """The six audit benchmark lines (security.md and benchmarks.md), at 2,000 draws."""
    lines = [
        ("--json audit.json ", f"--json audit.json --dims 2 --eps 1 {_SMALL_AUDIT} "),
        ("--planted ", f"--planted {_SMALL_AUDIT} "),
        ("--noise fresh --dims 2,16 --eps 1,4\n", f"--noise fresh --dims 2 --eps 1 {_SMALL_AUDIT}\n"),
        ("--raw --dims 2,16 --eps 1,4 ", f"--raw --dims 2 --eps 1 {_SMALL_AUDIT} "),
        ("--noise keyed --generator philox --dims 2,16 --eps 1 --samples 200000",
         f"--noise keyed --generator philox --dims 2 --eps 1 {_SMALL_AUDIT}"),
        ("--noise keyed --generator aes --dims 2 --eps 1 --samples 50000",
         f"--noise keyed --generator aes --dims 2 --eps 1 {_SMALL_AUDIT}"),
    ]  # fmt: skip
    # without nice: beside the other test worker a niced run gets a tenth of a core
    why = "1e6 draws, niced"
    return [
        Substitution(document, f"nice -n 10 {_BENCH_AUDIT} {old}", f"{_BENCH_AUDIT} {new}", why)
        for old, new in lines
    ]


#: long blocks run small: every ``old`` matches its document's blocks exactly once
SUBSTITUTIONS: list[Substitution] = [
    # attacks.md: the command synopsis on the README's notes
    Substitution("attacks.md", "-c disease -o disease.profile --seed 0 ",
                 "-c disease -o disease.profile --seed 0 --n 300 --epochs 40 --lr 3e-2 ",
                 "2,000 generated sentences"),
    Substitution("attacks.md", "-c date -o date.profile --seed 0\n",
                 "-c date -o date.profile --seed 0 --n 300 --epochs 40 --lr 3e-2\n",
                 "2,000 generated sentences"),
    Substitution("attacks.md", "--epochs 40 --lr 3e-3 --seed 0 -o token.json",
                 "--epochs 2 --lr 3e-3 --seed 0 --n 200 -o token.json", "40 epochs"),
    Substitution("attacks.md", "--epsilon 20 --releases 64", "--epsilon 20 --releases 4",
                 "64 releases"),
    Substitution("attacks.md", "--mask disease.profile --epsilon 40\n",
                 "--mask disease.profile --epsilon 40 --epochs 1\n", "20 decoder epochs"),
    # concepts.md: masks learned on 2,000 generated sentences
    Substitution("concepts.md", "--concept disease -o disease.profile --seed 0      #",
                 "--concept disease -o disease.profile --seed 0 --n 300 --epochs 40 --lr 3e-2 #",
                 "2,000 generated sentences"),
    Substitution("concepts.md", 'generate_sentences("disease", 2000, rng=0)',
                 'generate_sentences("disease", 300, rng=0)', "2,000 generated sentences"),
    Substitution("concepts.md", "-o disease-real.profile --eraser ",
                 "-o disease-real.profile --eraser --n 300 --epochs 40 --lr 3e-2 ", "2,000 generated sentences"),
    # evaluation.md: sweeps of 20-100 cells, each with a trained token attacker
    Substitution("evaluation.md", "-o report/ --texts notes.jsonl --runs 3",
                 f"-o report/ --texts notes.jsonl --runs 1 --mechanisms laplace {_SMALL_EVAL}",
                 "the whole theory grid, 3 runs"),
    Substitution("evaluation.md", "--texts notes.jsonl      # modes",
                 f"--texts notes.jsonl --mechanisms laplace {_SMALL_EVAL} # modes",
                 "every mechanism's search"),
    Substitution("evaluation.md", "-o reportA --texts notes.jsonl --runs 3 ",
                 f"-o reportA --texts notes.jsonl --runs 1 --mechanisms laplace {_SMALL_EVAL} ",
                 "60 cells"),
    Substitution("evaluation.md", "--plain-only --min-cosine 0.5 ",
                 f"--plain-only --min-cosine 0.5 --mechanisms laplace {_SMALL_EVAL} ",
                 "every mechanism's search"),
    Substitution("evaluation.md", "--plain-only --no-linkage --min-cosine 0.5 ",
                 f"--plain-only --no-linkage --min-cosine 0.5 --mechanisms laplace {_SMALL_EVAL} ",
                 "every mechanism's search"),
    Substitution("evaluation.md", "-o reportB --texts notes.jsonl --runs 3 --no-linkage",
                 f"-o reportB --texts notes.jsonl --runs 1 --mechanisms laplace {_SMALL_EVAL} "
                 "--no-linkage", "20 cells"),
    Substitution("evaluation.md", "for n in s(1000, seed=0)]", "for n in s(120, seed=0)]",
                 "1,000 notes"),
    Substitution("evaluation.md", '--lr 1e-2 --seed 0 -o "$c.profile"',
                 '--lr 1e-2 --seed 0 --n 300 --epochs 120 -o "$c.profile"',
                 "2,000 generated sentences per concept"),
    Substitution("evaluation.md", "--epsilon 1,5,10,20,50 --runs 5", "--epsilon 50 --runs 1",
                 "100 cells"),
    Substitution("evaluation.md", "--epsilon 50,100,200,500,1000 --runs 3",
                 "--epsilon 500 --runs 1", "60 cells"),
    Substitution("evaluation.md", "--attack-epochs 40 --attack-lr 3e-3                               # run A",
                 "--attack-epochs 2 --attack-lr 3e-3 --n-queries 100  # run A", "40 epochs"),
    Substitution("evaluation.md", "--attack-epochs 40 --attack-lr 3e-3                               # run B",
                 "--attack-epochs 2 --attack-lr 3e-3 --n-queries 100  # run B", "40 epochs"),
    Substitution("evaluation.md", "--n 1000 --report reportA reportB",
                 "--n 120 --report reportA reportB", "the notes above, made small"),
    # security.md: audits of 1e6 draws per side
    Substitution("security.md", "--samples 1000000 ", f"{_SMALL_AUDIT} ", "1e6 draws"),
    Substitution("security.md", "--dim 384 --json --power", f"--dim 384 --json --power {_SMALL_AUDIT}",
                 "1e6 draws"),
    Substitution("security.md", "--from-file protected.parquet ",
                 f"--from-file protected.parquet {_SMALL_AUDIT} ", "1e6 draws"),
    Substitution("security.md", "--fresh-noise --fail-on-violation",
                 f"--fresh-noise --fail-on-violation {_SMALL_AUDIT}", "1e6 draws"),
    Substitution("security.md", "--keyed --fail-unless-consistent",
                 f"--keyed --fail-unless-consistent {_SMALL_AUDIT}", "1e6 draws"),
    Substitution("security.md", "samples=1_000_000,", "samples=20_000,", "1e6 draws"),
    Substitution("security.md", 'generator="aes", rng=0)', 'generator="aes", samples=20_000, rng=0)',
                 "1e6 draws"),
    *_bench_audit("security.md"),
    Substitution("security.md", "pytest -q tests/test_audit.py tests/test_audit_verdicts.py ",
                 "pytest -q -p no:cacheprovider --collect-only tests/test_audit.py "
                 "tests/test_audit_verdicts.py ", "the suite runs these tests itself: collected"),
    # benchmarks.md
    Substitution("benchmarks.md", "python benchmarks/bench_mechanisms.py          #",
                 "python benchmarks/bench_mechanisms.py --n 500 --dims 8 --repeats 1 #",
                 "100,000 rows, 3 repeats"),
    *_bench_audit("benchmarks.md"),
    Substitution("benchmarks.md",
                 "--n 117659 --parts latency memory --queries-list 100 2000 \\\n    --depths 1000 "
                 "--latency-queries 50",
                 "--n 2000 --parts latency memory --queries-list 10 20 \\\n    --depths 100 "
                 "--latency-queries 5", "117,659 documents"),
    Substitution("benchmarks.md", "--part storage --n-store 20000", "--part storage --n-store 300",
                 "20,000 records"),
    Substitution("benchmarks.md", "--n 117659 --parts latency --latency-queries 50 \\",
                 "--n 2000 --parts latency --latency-queries 5 \\", "117,659 documents"),
    # integrations.md
    Substitution("integrations.md", "privembed serve --config serve.toml                #",
                 _SERVE_AND_STOP, "a server runs until stopped"),
    Substitution("integrations.md", "--part shards --n 1000000 ", "--part shards --n 2000 ",
                 "1e6 rows"),
    Substitution("integrations.md", "--part chroma --n-index 20000", "--part chroma --n-index 1000 --n-queries 50",
                 "20,000 records"),
    # server.md
    Substitution("server.md", "privembed serve --config serve.toml           #", _SERVE_AND_STOP,
                 "a server runs until stopped"),
    # text_sanitization.md: the whole GloVe vocabulary (400,000 words), 5,000 words per epsilon
    Substitution("text_sanitization.md", "--words 5000 -o text-analysis     #",
                 "--words 200 --limit 20000 -o text-analysis     #", "400,000 words"),
    Substitution("text_sanitization.md", "--words 5000 -o text-analysis --seed 0",
                 "--words 200 --limit 20000 -o text-analysis --seed 0", "400,000 words"),
    Substitution("text_sanitization.md", "python docs/experiments/text_analysis.py              #",
                 "python docs/experiments/text_analysis.py --steps gaps --gap-words 100 #",
                 "the proportions step: 5 CPU-minutes"),
    Substitution("text_sanitization.md", "text_analysis.py --steps dot  #",
                 "text_analysis.py --steps dot --words 100  #", "minutes of CPU"),
    Substitution("text_sanitization.md", "bench_text.py --threads 2 ",
                 "bench_text.py --threads 2 --words 1000 --repeat 1 --limit 20000 ",
                 "400,000 words"),
    Substitution("text_sanitization.md", "text_exact_search_bounds.py   #",
                 "text_exact_search_bounds.py --queries 5   #", "minutes of CPU"),
]  # fmt: skip


# ---- blocks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    body: str
    needs: tuple[str, ...] = field(default=())

    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language == "python" or self.language in SHELLS

    def code(self, substitutions: list[Substitution] | None = None) -> str:
        """What runs: the body (a console block's ``$`` commands), substitutions applied."""
        text = self.body
        for s in SUBSTITUTIONS if substitutions is None else substitutions:
            if s.document == self.document.name:
                text = text.replace(s.old, s.new)
        if self.language == "console":
            text = console_commands(text)
        return text


def console_commands(body: str) -> str:
    """The ``$ `` lines of a console block and their ``\\`` continuations, as a script."""
    out: list[str] = []
    going = False
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append(line[2:])
        elif going:
            out.append(line)
        else:
            continue
        going = line.rstrip().endswith("\\")
    return "\n".join(out) + "\n"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order; an unlabelled or unknown one is an error."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        words = m.group("info").split()
        line = text.count("\n", 0, m.start()) + 1
        language = words[0] if words else ""
        if language != "python" and language not in SHELLS and language not in DATA:
            raise ValueError(
                f"{path.name}:{line}: a code block is labelled bash, sh, shell, console, python, "
                f"toml, json or text (a diagram, sample output), got {m.group('info')!r}"
            )
        body = m.group("body")
        needs = tuple(n.group("what") for n in NEEDS.finditer(body))
        if needs and language not in SHELLS and language != "python":
            raise ValueError(f"{path.name}:{line}: '# needs:' is for blocks that run")
        for what in needs:
            _need_kind(what, f"{path.name}:{line}")
        out.append(Block(path, line, language, body, needs))
    return out


def _key(what: str, table: dict[str, Any]) -> str | None:
    found = [k for k in table if what.startswith(k) and not what[len(k) :][:1].isalnum()]
    return max(found, key=len) if found else None


def _need_kind(what: str, where: str) -> str:
    if _key(what, PROVIDERS) is not None:
        return "provided"
    if _key(what, UNAVAILABLE) is not None:
        return "unavailable"
    raise ValueError(
        f"{where}: '# needs: {what}' names nothing the docs test knows: start it with one of "
        f"{sorted(PROVIDERS)} or {sorted(UNAVAILABLE)} (tests/test_docs.py)"
    )


def unavailable(block: Block) -> list[str]:
    """The reasons no test machine can run ``block`` (empty: it runs)."""
    out = []
    for what in block.needs:
        key = _key(what, UNAVAILABLE)
        if key is not None:
            out.append(f"needs {what}: {UNAVAILABLE[key]}")
    return out


# ---- providers: what the test supplies for a stated need --------------------------------------


class Supplies:
    """What the blocks of one test module share: files built once from the bundled sample, and
    the folder each block left behind (for a later block that needs "the block above")."""

    def __init__(
        self, root: Path, request: pytest.FixtureRequest, built: dict[str, Path] | None = None
    ) -> None:
        self.root = root
        self.request = request
        self.built: dict[str, Path] = {} if built is None else built  # shared by the modules
        self.after: dict[str, Path] = {}  # block.where() -> a copy of its folder after it ran
        self.env: dict[str, str] = _env()
        self.server: subprocess.Popen[bytes] | None = None
        self.server_env: dict[str, str] = {}

    def file(self, name: str, make: Callable[[Path], None]) -> Path:
        if name not in self.built:
            folder = self.root / f"built-{len(self.built)}-{name}"
            folder.mkdir()
            make(folder)
            self.built[name] = folder / name
        return self.built[name]

    def prepare(self, block: Block, cwd: Path) -> None:
        """Provide every need of ``block`` in ``cwd`` (and ``self.env``)."""
        reasons = unavailable(block)
        if reasons:
            pytest.skip(f"{block.where()}: " + "; ".join(reasons))
        for what in block.needs:
            key = _key(what, PROVIDERS)
            assert key is not None
            PROVIDERS[key](self, cwd, block)

    def ran(self, block: Block, cwd: Path) -> None:
        if block.where() not in self.after:
            copy = self.root / f"after-{len(self.after)}"
            shutil.copytree(cwd, copy, symlinks=True)
            self.after[block.where()] = copy


def _privembed(*args: str, cwd: Path) -> None:
    r = subprocess.run(
        ["privembed", *args], cwd=cwd, env=_env(), capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, f"privembed {' '.join(args)}: {r.stderr[-2000:]}"


def _write_notes(folder: Path) -> None:
    """The README's notes: 300 sentences of gensim's Lee corpus, with a ``lang`` field."""
    from privembed.evaluation.loaders import lee_background

    with open(folder / "notes.jsonl", "w", encoding="utf-8") as fh:
        for i, text in enumerate(lee_background(sentences=True)[:300]):
            fh.write(json.dumps({"id": i, "text": text, "lang": "en"}) + "\n")


def _notes(s: Supplies, cwd: Path, block: Block) -> None:
    shutil.copy(s.file("notes.jsonl", _write_notes), cwd / "notes.jsonl")


def _embeddings(s: Supplies, cwd: Path, block: Block) -> None:
    def make(folder: Path) -> None:
        _write_notes(folder)
        _privembed("embed", "notes.jsonl", "-o", "emb.parquet", cwd=folder)

    shutil.copy(s.file("emb.parquet", make), cwd / "emb.parquet")


def _key_file(name: str) -> Callable[[Supplies, Path, Block], None]:
    def provide(s: Supplies, cwd: Path, block: Block) -> None:
        from privembed.keys.keyed import keygen

        keygen(cwd / name)

    return provide


def _postgres(s: Supplies, cwd: Path, block: Block) -> None:
    try:
        url = s.request.getfixturevalue("pg_url")
    except Exception as e:  # pgserver missing or the server did not start
        pytest.skip(f"no local PostgreSQL with pgvector here ({type(e).__name__}: {e})")
    s.env["PRIVEMBED_PG_DSN"] = url


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(url: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    import time
    import urllib.request

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"privembed serve exited {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"privembed serve did not answer {url} in {seconds:.0f} s")


def _server(s: Supplies, cwd: Path, block: Block) -> None:
    """One ``privembed serve`` for the module, from the quick start's ``--init`` config; its
    URL and client key in ``PRIVEMBED_BASE_URL`` and ``PRIVEMBED_API_KEY``."""
    if s.server is None:
        folder = s.root / "server"
        folder.mkdir()
        r = subprocess.run(
            ["privembed", "serve", "--init"], cwd=folder, env=_env(), capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        api_key = next(w for w in r.stdout.split() if w.startswith("pe-"))
        port = _free_port()
        s.server = subprocess.Popen(
            ["privembed", "serve", "--config", "serve.toml", "--port", str(port)],
            cwd=folder, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for(f"http://127.0.0.1:{port}/healthz", s.server, 180)
        s.server_env = {
            "PRIVEMBED_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "PRIVEMBED_API_KEY": api_key,
        }
    s.env.update(s.server_env)


def _repository(s: Supplies, cwd: Path, block: Block) -> None:
    """The scripts a reproduction runs (``benchmarks/``, ``docs/experiments/``,
    ``docs/reproductions/``), copied: what they write stays out of the checkout."""
    for sub in ("benchmarks", "docs/experiments", "docs/reproductions", "docs/figures", "tests"):
        shutil.copytree(
            REPO / sub, cwd / sub, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True
        )
    shutil.copy(REPO / "pyproject.toml", cwd / "pyproject.toml")


def _block_above(s: Supplies, cwd: Path, block: Block) -> None:
    """The folder the document's previous block left (that block run first when it has not)."""
    mine = [b for b in RUN if b.document == block.document]
    i = mine.index(block)
    assert i > 0, f"{block.where()} needs the block above, and is the first of its document"
    above = mine[i - 1]
    if above.where() not in s.after:
        folder = s.root / f"above-{len(s.after)}"
        folder.mkdir()
        s.prepare(above, folder)
        _check(above, run_block(above, folder, s.env), "run for the block below it")
        s.ran(above, folder)
    shutil.copytree(s.after[above.where()], cwd, symlinks=True, dirs_exist_ok=True)


#: what a ``# needs:`` line may name and the test supplies
PROVIDERS: dict[str, Callable[[Supplies, Path, Block], None]] = {
    "the block above": _block_above,
    "notes.jsonl": _notes,
    "emb.parquet": _embeddings,
    "release.key": _key_file("release.key"),
    "search.key": _key_file("search.key"),
    "a PostgreSQL with pgvector": _postgres,
    "a running privembed serve": _server,
    "the repository root": _repository,
}


# ---- running ----------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["COLUMNS"] = "100"
    env.pop("PRIVEMBED_DEBUG", None)
    return env


def run_block(
    block: Block, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    code = block.code()
    if block.language == "python":
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )


def _check(block: Block, r: subprocess.CompletedProcess[str], when: str) -> None:
    assert r.returncode == 0, (
        f"{block.where()} ({block.language}, {when}) exited {r.returncode}\n--- block ---\n"
        f"{block.code()}\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-3000:]}"
    )


ALL = [b for p in DOCUMENTS for b in blocks(p)]
RUN = [b for b in ALL if b.runs]
DATA_BLOCKS = [b for b in ALL if not b.runs]


@pytest.fixture(scope="session")
def built_files() -> dict[str, Path]:
    """The files built from the bundled sample, once per test process (every module's)."""
    return {}


@pytest.fixture(scope="module")
def supplies(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    built_files: dict[str, Path],
) -> Iterator[Supplies]:
    s = Supplies(tmp_path_factory.mktemp("supplies"), request, built_files)
    yield s
    if s.server is not None:
        s.server.terminate()
        s.server.wait(timeout=30)


#: the documents whose blocks each ``tests/test_docs_run_<group>.py`` runs: one test file per
#: group, so pytest-xdist's workers (one file at a time each) share the blocks; every document
#: with a block that runs is in exactly one group (``tests/test_docs.py`` checks), the groups
#: sized by their blocks' time (about 4 minutes each on two busy cores)
RUN_GROUPS: dict[str, tuple[str, ...]] = {
    "a": ("integrations.md", "server.md", "projection.md"),
    "b": ("evaluation.md", "README.md"),
    "c": ("attacks.md", "concepts.md"),
    "d": ("benchmarks.md", "security.md", "retrieval.md", "text_sanitization.md"),
}


def run_group(group: str) -> list[Block]:
    """The blocks that run, of the documents of ``RUN_GROUPS[group]``."""
    names = RUN_GROUPS[group]
    return [b for b in RUN if b.document.name in names]


def block_test(group: str) -> tuple[list[Block], Callable[..., None]]:
    """The blocks of ``group`` and a test that runs each as written, for the module of that
    group to bind as ``test_block_runs_as_written`` (a new function per group: each module's
    parametrization is its own)."""
    group_blocks = run_group(group)

    @pytest.mark.slow
    @pytest.mark.parametrize("block", group_blocks, ids=[b.where() for b in group_blocks])
    def test_block_runs_as_written(
        block: Block, supplies: Supplies, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        runs_as_written(block, supplies, request, tmp_path)

    return group_blocks, test_block_runs_as_written


def runs_as_written(block: Block, supplies: Supplies, request: Any, tmp_path: Path) -> None:
    """Run ``block`` in the empty ``tmp_path`` with its needs supplied; it must exit 0 (a
    Python block that wrote something, twice)."""
    supplies.request = request  # function-scoped fixtures (a PostgreSQL database) for this block
    supplies.env = _env()
    supplies.env["DOCS_PORT"] = str(_free_port())  # for a block that starts a server
    supplies.prepare(block, tmp_path)
    before = _listing(tmp_path)
    _check(block, run_block(block, tmp_path, supplies.env), "first run")
    supplies.ran(block, tmp_path)
    if block.language == "python" and _listing(tmp_path) != before:
        # what it wrote (a key file, an output it may refuse to replace) is there now
        _check(block, run_block(block, tmp_path, supplies.env), "second run in the same folder")


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


# ---- every documented command line parses ---------------------------------------------------


def command_lines(path: Path) -> list[tuple[int, list[str]]]:
    """``privembed ...`` lines of the code blocks of ``path`` (continuations joined; comments,
    ``$`` prompts and pipes dropped), as argument lists; lines with ``...`` are skipped."""
    import shlex

    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group("info").split()[:1] in (["python"], ["toml"], ["json"], ["text"]):
            continue
        start = text.count("\n", 0, m.start()) + 2
        joined: list[tuple[int, str]] = []
        for i, raw in enumerate(m.group("body").splitlines()):
            line = raw.rstrip()
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((start + i, line.strip()))
        for lineno, line in joined:
            line = line.removeprefix("$ ")
            if not line.startswith("privembed ") or "..." in line:
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            for stop in ("|", ">", "<", "&&", ";", "&"):
                if stop in words:
                    words = words[: words.index(stop)]
            out.append((lineno, words[1:]))
    return out


LINES = [(f"{p.name}:{n}", args) for p in DOCUMENTS for n, args in command_lines(p)]
