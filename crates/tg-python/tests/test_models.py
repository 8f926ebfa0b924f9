"""Models from Python against the `tg` command line: Gemma 3 tokenization, greedy and
sampled generation, logits; EmbeddingGemma embeddings.

Python and the CLI run the same Rust code (same graph, compiler, plan, kernels and thread
count), so their outputs must be *bitwise* equal: logits are compared as float32 bit
patterns (through the CLI's raw ``--out`` file and its JSON, whose floats are the shortest
text that round-trips a float32), embeddings likewise. Bitwise equality is stricter than
an NMSE bound and holds because every kernel is deterministic for a given thread count.

Needs the models (see conftest.py: missing models fail unless TG_ALLOW_MISSING_MODEL=1) and
the `tg` binary (TG_CLI or target/release/tg).
"""

from __future__ import annotations

import json
import subprocess
import threading

import numpy as np
import pytest

import tensor_graphs as tg
from conftest import REPO
from test_gil import progress_during

PROMPT = "The capital of France is"
QUERY = "Which planet is known as the Red Planet?"
DOCUMENTS = [
    "Venus is often called Earth's twin because of its similar size and proximity.",
    "Mars, known for its reddish appearance, is often referred to as the Red Planet.",
    "Jupiter, the largest planet in our solar system, has a prominent red spot.",
    "Saturn, famous for its rings, is sometimes mistaken for the Red Planet.",
]


def cli(tg_cli, *args: str) -> str:
    r = subprocess.run([str(tg_cli), *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"tg {' '.join(args)} failed: {r.stderr}"
    return r.stdout


# Gemma 3 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["The capital of France is", "  leading and  double spaces\nand lines\n", "héllo wörld — 日本語 🙂 ½", "<start_of_turn>user\nhi<end_of_turn>", ""],
)
def test_tokenize_roundtrip(gemma, text):
    ids = gemma.tokenize(text, add_bos=False)
    assert all(isinstance(i, int) for i in ids)
    special = "<start_of_turn>" in text
    assert gemma.detokenize(ids, render_special=special) == text
    with_bos = gemma.tokenize(text)
    assert with_bos[0] == gemma.bos_id and with_bos[1:] == ids
    if special:
        assert gemma.tokenize(text, add_bos=False, parse_special=False) != ids


def test_tokenize_matches_cli(gemma, gemma_path, tg_cli):
    out = cli(tg_cli, "tokenize", "--model", str(gemma_path), "--bos", "--special", PROMPT)
    ids = [int(line.split()[0]) for line in out.splitlines() if line.strip()]
    assert gemma.tokenize(PROMPT) == ids


def test_greedy_generation_matches_cli(gemma, gemma_path, tg_cli):
    n = 12
    ref = json.loads(cli(tg_cli, "generate", "--json", "--model", str(gemma_path), "-n", str(n), "--prompt", PROMPT))
    text = gemma.generate(PROMPT, max_tokens=n)
    assert text == ref["text"]
    stream = gemma.generate(PROMPT, max_tokens=n, stream=True)
    toks = list(stream)
    assert [t.id for t in toks] == ref["tokens"]
    assert "".join(t.text for t in toks) == ref["text"] == stream.text
    assert stream.tokens == ref["tokens"] and stream.prompt_tokens == ref["prompt_tokens"]
    assert set(stream.timings) == {"prompt_ms", "generate_ms", "compile_ms"}
    assert list(stream) == []  # exhausted
    # Token ids as the prompt give the same continuation.
    assert gemma.generate(ref["prompt_tokens"], max_tokens=n) == ref["text"]
    print(f"greedy: {ref['text']!r}")


def test_sampled_generation_matches_cli(gemma, gemma_path, tg_cli):
    args = dict(max_tokens=10, temperature=0.8, top_k=20, top_p=0.9, seed=1234)
    ref = json.loads(
        cli(tg_cli, "generate", "--json", "--model", str(gemma_path), "-n", "10", "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "1234", "--prompt", "Once upon a time")
    )
    toks = [t.id for t in gemma.generate("Once upon a time", stream=True, **args)]
    assert toks == ref["tokens"]
    assert gemma.generate("Once upon a time", **args) == ref["text"]
    other = [t.id for t in gemma.generate("Once upon a time", stream=True, **{**args, "seed": 99})]
    assert other != toks  # the seed matters


def test_logits_match_cli_bitwise(gemma, gemma_path, tg_cli, tmp_path):
    ids = gemma.tokenize(PROMPT)
    logits = gemma.logits(ids)
    assert logits.dtype == np.float32 and logits.shape == (gemma.vocab_size,)
    raw = tmp_path / "logits.f32"
    cli(tg_cli, "logits", "--model", str(gemma_path), "--prompt", PROMPT, "--out", str(raw))
    from_file = np.fromfile(raw, dtype="<f4")
    assert np.array_equal(from_file.view(np.uint32), logits.view(np.uint32)), "logits differ from `tg logits --out`"
    ref = json.loads(cli(tg_cli, "logits", "--model", str(gemma_path), "--prompt", PROMPT, "--json"))
    assert ref["prompt_tokens"] == ids and ref["n_vocab"] == gemma.vocab_size
    from_json = np.array(ref["logits"], dtype=np.float64).astype(np.float32)
    assert np.array_equal(from_json.view(np.uint32), logits.view(np.uint32)), "logits differ from `tg logits --json`"
    assert int(np.argmax(logits)) == ref["argmax"]
    # Text prompts are tokenized with BOS, like the CLI.
    assert np.array_equal(gemma.logits(PROMPT).view(np.uint32), logits.view(np.uint32))
    # --no-bos
    ref2 = json.loads(cli(tg_cli, "logits", "--model", str(gemma_path), "--prompt", PROMPT, "--json", "--no-bos"))
    nobos = gemma.logits(gemma.tokenize(PROMPT, add_bos=False))
    assert np.array_equal(np.float32(ref2["logits"]).view(np.uint32), nobos.view(np.uint32))


def test_logits_all_positions(gemma):
    ids = gemma.tokenize(PROMPT)
    last = gemma.logits(ids)
    allp = gemma.logits(ids, all_positions=True)
    assert allp.shape == (len(ids), gemma.vocab_size) and allp.dtype == np.float32
    # A different plan (every row through the output matmul): equal up to float32 rounding.
    d = allp[-1].astype(np.float64) - last
    nmse = float((d * d).sum() / (last.astype(np.float64) ** 2).sum())
    assert nmse < 1e-10, nmse
    # Row i is the prediction after token i: the greedy next token of the prefix.
    assert int(np.argmax(allp[2])) == int(np.argmax(gemma.logits(ids[:3])))


def test_model_request_errors(gemma):
    with pytest.raises(tg.RequestError, match="empty token sequence"):
        gemma.logits([])
    with pytest.raises(tg.RequestError, match="outside the vocabulary"):
        gemma.logits([2, gemma.vocab_size])
    with pytest.raises(tg.RequestError, match="outside the vocabulary"):
        gemma.detokenize([gemma.vocab_size + 5])
    with pytest.raises(tg.RequestError, match="temperature must be"):
        gemma.generate(PROMPT, temperature=-1.0)
    with pytest.raises(tg.RequestError, match="top-p must be in"):
        list(gemma.generate(PROMPT, top_p=0.0, temperature=1.0, stream=True))
    with pytest.raises(tg.RequestError, match="the prompt has no tokens"):
        gemma.generate([], max_tokens=2)
    with pytest.raises(tg.RequestError, match="exceeds the context length"):
        gemma.generate(PROMPT, max_tokens=10**6)
    with pytest.raises(OverflowError):
        gemma.generate(PROMPT, max_tokens=-1)


def test_stream_close_stops_early(gemma):
    s = gemma.generate("Count: one, two, three,", max_tokens=50, stream=True)
    first = next(s)
    assert isinstance(first, tg.Token) and first.id == s.tokens[0]
    s.close()
    assert list(s) == []
    # The model is free again right away (the background loop stopped after its token).
    assert isinstance(gemma.generate(PROMPT, max_tokens=2), str)


def test_gemma_properties(gemma, gemma_path):
    assert gemma.path == gemma_path
    assert gemma.vocab_size == 262144 and gemma.context_length > 1000
    assert gemma.config["n_vocab"] == gemma.vocab_size
    assert gemma.token_text(gemma.tokenize("Paris", add_bos=False)[0]).endswith("Paris")
    gemma.logits([gemma.bos_id])
    rep = gemma.explain()
    assert [s["name"] for s in rep["stages"]] == list(tg.STAGES)
    assert "LanguageModel(path=" in repr(gemma) and gemma.config["norm_offset"] == 0.0
    assert tg.Gemma3 is tg.LanguageModel  # the earlier name still works


def test_incremental_generation_equals_recomputing(gemma):
    assert gemma.incremental
    fast = gemma.generate(PROMPT, max_tokens=8)
    info = gemma.session()
    # Keys and values of all 18 layers, chosen by the compiler; prompt + 7 appended tokens.
    assert len(info["states"]) == 36 and info["bytes"] > 0
    assert info["tokens"] == len(gemma.tokenize(PROMPT)) + 7
    try:
        gemma.incremental = False
        assert gemma.generate(PROMPT, max_tokens=8) == fast
    finally:
        gemma.incremental = True
    # The same prompt again reuses everything but its last token.
    assert gemma.generate(PROMPT, max_tokens=8) == fast
    assert gemma.session()["reused"] == len(gemma.tokenize(PROMPT)) - 1


def test_gemma_generation_releases_the_gil(gemma):
    stall, secs, text = progress_during(lambda: gemma.generate(PROMPT, max_tokens=6))
    assert isinstance(text, str)
    assert stall < 0.3 * secs, f"stalled {stall * 1e3:.0f} ms of {secs * 1e3:.0f} ms"


# EmbeddingGemma ---------------------------------------------------------------------------


def test_qwen_chat_matches_cli_and_llama_cpp(qwen_path, tg_cli, tmp_path):
    """Any decoder GGUF through the same classes: Qwen2 with its chat template, from
    ``LanguageModel`` and from ``load``, equal to ``tg generate --messages`` and to llama.cpp's
    greedy tokens (tests/fixtures/llama_cpp/qwen2.5-coder)."""
    fixture = json.loads((REPO / "tests/fixtures/llama_cpp/qwen2.5-coder/greedy.json").read_text())
    case = next(c for c in fixture["chats"] if c["slug"] == "chat_multi_turn")
    messages = case["messages"]
    f = tmp_path / "messages.json"
    f.write_text(json.dumps(messages))
    n = 12
    ref = json.loads(cli(tg_cli, "generate", "--json", "--model", str(qwen_path), "-n", str(n), "--messages", str(f)))
    assert ref["prompt_tokens"] == case["prompt_tokens"]
    assert ref["tokens"] == case["generated_tokens"][:n]
    m = tg.LanguageModel(qwen_path, threads=2)
    assert m.config["arch"] == "qwen2"
    assert m.chat(messages, max_tokens=n) == ref["text"]
    toks = [t.id for t in m.chat(messages, max_tokens=n, stream=True)]
    assert toks == ref["tokens"]
    # A stop string ends the text before it.
    cut = m.chat(messages, max_tokens=n, stop=["size"])
    assert "size" not in cut and ref["text"].startswith(cut)
    s = tg.load(qwen_path)
    assert "generate" in s.capabilities
    assert s.chat(messages, max_tokens=n) == ref["text"]
    with pytest.raises(tg.RequestError, match="entry 1"):
        m.chat([{"role": "user", "content": "hi"}, {"content": "no role"}])
    with pytest.raises(tg.RequestError):
        m.chat("not a list")


def test_embed_query_matches_cli(embedder, embed_path, tg_cli):
    ref = json.loads(cli(tg_cli, "embed", "--json", "--model", str(embed_path), "--prompt-name", "query", QUERY))
    got = embedder.embed([QUERY], prompt_name="query")
    assert got.shape == (1, embedder.output_dim) and got.dtype == np.float32
    want = np.array(ref["embeddings"], dtype=np.float64).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"max diff {np.abs(got - want).max()}"
    single = embedder.embed(QUERY, prompt_name="query")
    assert single.shape == (embedder.output_dim,)
    assert np.array_equal(single.view(np.uint32), got[0].view(np.uint32))
    assert ref["token_counts"] == [len(embedder.tokenize(QUERY, prompt_name="query"))]


def test_embed_documents_match_cli_and_rank_mars_first(embedder, embed_path, tg_cli):
    ref = json.loads(cli(tg_cli, "embed", "--json", "--model", str(embed_path), "--prompt-name", "document", "--dim", "256", *DOCUMENTS))
    docs = embedder.embed(DOCUMENTS, prompt_name="document", dim=256)
    assert docs.shape == (4, 256)
    want = np.array(ref["embeddings"], dtype=np.float64).astype(np.float32)
    assert np.array_equal(docs.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    q = embedder.embed(QUERY, prompt_name="query", dim=256)
    scores = docs @ q
    assert int(np.argmax(scores)) == 1, scores  # Mars
    print(f"similarities: {np.round(scores, 4)}")


def test_embedding_properties_and_errors(embedder):
    assert {"query", "document", "STS"} <= set(embedder.prompts)
    assert embedder.prompts["query"].startswith("task: search result")
    assert embedder.output_dim == 768 and embedder.max_seq_length > 0
    assert embedder.embed([], prompt_name="query").shape == (0, 768)
    with pytest.raises(tg.RequestError, match="unknown prompt name 'nope'"):
        embedder.embed("x", prompt_name="nope")
    with pytest.raises(tg.RequestError, match="output dimension 2000 must be within"):
        embedder.embed("x", dim=2000)
    with pytest.raises(TypeError):
        embedder.embed(42)


def test_embed_releases_the_gil_and_serves_two_threads(embedder):
    texts = [f"sentence number {i} about planets and stars" for i in range(24)]
    want = embedder.embed(texts)
    stall, secs, got = progress_during(lambda: embedder.embed(texts))
    assert np.array_equal(got, want)
    assert stall < 0.3 * secs, f"stalled {stall * 1e3:.0f} ms of {secs * 1e3:.0f} ms"
    results = {}

    def go(k):
        results[k] = embedder.embed(texts[k::2])

    ts = [threading.Thread(target=go, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "deadlock"
    for k in range(2):
        np.testing.assert_allclose(results[k], want[k::2], rtol=1e-5, atol=1e-6)
